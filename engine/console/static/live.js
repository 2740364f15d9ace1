// Live updates for a run page: an element with data-live names the run's
// event stream (Server-Sent Events, id = runSeq; the browser resumes with
// Last-Event-ID). On each event the page is fetched again and the
// elements marked data-swap are replaced; without JavaScript the page is
// complete, only not live.
(function () {
  "use strict";
  var el = document.querySelector("[data-live]");
  if (!el || !window.EventSource) return;
  var es = new EventSource(el.getAttribute("data-live"));
  var busy = false, again = false;
  function swap() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      document.querySelectorAll("[data-swap]").forEach(function (n) {
        var m = doc.getElementById(n.id);
        if (m) {
          if (n.contains(document.activeElement)) return; // keep keyboard focus where it is
          m.removeAttribute("data-live");
          n.replaceWith(document.importNode(m, true));
        }
      });
    }).catch(function () {}).then(function () {
      busy = false;
      if (again) { again = false; setTimeout(swap, 100); }
    });
  }
  var timer = null;
  es.addEventListener("runevent", function () {
    if (!timer) timer = setTimeout(function () { timer = null; swap(); }, 150);
  });
  es.addEventListener("end", function () {
    es.close();
    document.documentElement.setAttribute("data-run-ended", "true");
    swap();
  });
})();
