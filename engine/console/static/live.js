// Live updates for a run page: an element with data-live names the run's
// event stream (Server-Sent Events, id = runSeq; the browser resumes with
// Last-Event-ID). On each event the page is fetched again and the
// elements marked data-swap are replaced; without JavaScript the page is
// complete, only not live.
(function () {
  "use strict";
  var el = document.querySelector("[data-live]");
  if (!el || !window.EventSource) return;
  var es = null, ended = false;
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
  function connect() {
    es = new EventSource(el.getAttribute("data-live"));
    es.addEventListener("runevent", function () {
      if (!timer) timer = setTimeout(function () { timer = null; swap(); }, 150);
    });
    es.addEventListener("end", function () {
      ended = true;
      es.close();
      document.documentElement.setAttribute("data-run-ended", "true");
      swap();
    });
    // A dropped stream the browser reconnects by itself; one the console
    // refused (503: it serves a bounded number of streams) it gives up on.
    // Try again later, and catch up on what changed meanwhile.
    es.addEventListener("error", function () {
      if (es.readyState !== EventSource.CLOSED || ended) return;
      document.documentElement.setAttribute("data-live-retry", "true");
      setTimeout(function () { swap(); connect(); }, 5000);
    });
  }
  connect();
})();
