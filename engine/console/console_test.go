package console_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/console"
	"github.com/dvtrun/dvtrun/engine/queue"
)

// get serves one GET and returns its status, body and response.
func get(t testing.TB, h http.Handler, path string, hdr ...string) (int, string, *http.Response) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Host = "localhost:8080" // httptest's example.com is refused without auth (DNS rebinding)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res
}

func TestPages(t *testing.T) {
	w := newWorld(t)
	// The outbox of a sink holds every event pending.
	if _, err := w.st.EnqueueDeliveries(ctx, "audit-sink"); err != nil {
		t.Fatal(err)
	}
	srv := w.server(t, func(c *console.Config) {
		c.Schedules = func(context.Context) ([]console.Schedule, error) {
			return []console.Schedule{{Name: "nightly", Cron: "0 2 * * *", Timezone: "UTC", Missed: 2}}, nil
		}
	})
	ok, failed, live := w.ok.Meta.RunID, w.failed.Meta.RunID, w.live.Meta.RunID
	cases := []struct {
		name, path string
		want       []string
		notWant    []string
	}{
		{"runs", "/runs", []string{ok, failed, live, "TEST_FAILED", "schedule:nightly", "test.positive_amount"}, nil},
		{"runs failed", "/runs?status=FAILED", []string{failed, w.hostile.Meta.RunID}, []string{ok, live}},
		{"runs by trigger", "/runs?trigger=schedule", []string{failed}, []string{ok, live}},
		{"runs by target", "/runs?target=prod", []string{failed}, []string{ok, live}},
		{"runs by plan and window", "/runs?plan=shop_plan&since=2026-01-01&until=2100-01-01", []string{ok, live}, []string{failed}},
		{"failing view", "/runs?view=failing", []string{failed, "Failed and not succeeded since"}, []string{ok, live}},
		{"run header", "/runs/" + failed, []string{"nightly_plan@7", "ab12", "prod", "schedule:nightly", "2026-04-01T00:00:00Z → 2026-04-02T00:00:00Z",
			"dvtrun retry " + failed, "dvtrun schedule trigger nightly", "dvtrun plan show " + failed + " --list", "✓ verified", "TEST_FAILED", `href="/runs/` + failed + `/steps/test.positive_amount"`,
			"ledger: ", "not checked: the console was started without the warehouse"}, []string{"data-live"}},
		{"run gantt keeps queue wait apart", "/runs/" + failed, []string{`id="gantt"`, `data-step="queue wait"`, `data-step="run"`, `fill="url(#hatch)"`}, nil},
		{"run dag", "/runs/" + failed, []string{`id="dag"`, `data-step="model.report" data-status="SKIPPED"`, `data-step="test.positive_amount" data-status="FAILED"`,
			`data-step="model.orders" data-status="SUCCESS"`, `data-step="seed.customers" data-status="PENDING"`, "✗ FAILED", `marker-end="url(#arrow)"`}, nil},
		{"live run follows", "/runs/" + live, []string{`data-live="/runs/` + live + `/events?after=3"`, "▶ RUNNING", "dvtrun status " + live + " --follow",
			"not verified: the run has not ended"}, []string{"verify now"}},
		{"step", "/runs/" + failed + "/steps/test.positive_amount", []string{"SELECT *\nFROM orders\n\tWHERE amount &lt; 0 -- &lt;b&gt;not bold&lt;/b&gt;",
			failingMsg, "TEST_FAILED", `id="step-error"`, "Failing rows"}, []string{"<b>not bold</b>", `SELECT *\nFROM`, `\tWHERE`}},
		{"completed step", "/runs/" + ok + "/steps/model.orders", []string{"CREATE TABLE orders AS SELECT 1", "Rows affected", "✓ SUCCESS"}, nil},
		{"events errors only on a failed run", "/runs/" + failed + "/events", []string{"StepFailed", "RunFailed", "errors only"}, []string{"<td>StepStarted</td>", "<td>RunQueued</td>"}},
		{"events all", "/runs/" + failed + "/events?errors=0", []string{"<td>RunQueued</td>", "<td>StepStarted</td>", "<td>StepFailed</td>"}, nil},
		{"events by type", "/runs/" + failed + "/events?type=StepCompleted&errors=0", []string{"<td>StepCompleted</td>"}, []string{"<td>StepStarted</td>", "<td>RunFailed</td>"}},
		{"events by step", "/runs/" + failed + "/events?step=model.orders&errors=0", []string{"<td>StepStarted</td>", "<td>StepCompleted</td>"}, []string{"<td>StepFailed</td>"}},
		{"events of a completed run are all shown", "/runs/" + ok + "/events", []string{"<td>RunQueued</td>", "<td>RunCompleted</td>"}, []string{"Showing errors only"}},
		{"schedules", "/schedules", []string{"nightly", "0 2 * * *", "<strong>2</strong>"}, nil},
		{"queue", "/queue", []string{"0 waiting, 0 claimed, 0 running", "The run queue is empty."}, nil},
		{"workers", "/workers", []string{"No worker has a heartbeat or holds a request."}, nil},
		{"outbox", "/outbox", []string{"Dead letters", "Pending", failed, "audit-sink", "RunFailed"}, nil},
		{"static css", "/static/console.css", []string{"prefers-color-scheme: dark"}, nil},
		{"static script", "/static/live.js", []string{"EventSource", "Last-Event-ID"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body, _ := get(t, srv, c.path)
			if status != http.StatusOK {
				t.Fatalf("GET %s: %d\n%s", c.path, status, body)
			}
			for _, s := range c.want {
				if !strings.Contains(body, s) {
					t.Errorf("GET %s: no %q in\n%s", c.path, s, body)
				}
			}
			for _, s := range c.notWant {
				if strings.Contains(body, s) {
					t.Errorf("GET %s: %q should not be there", c.path, s)
				}
			}
		})
	}
}

func TestRootRedirectsAndPaging(t *testing.T) {
	w := newWorld(t)
	srv := w.server(t, nil)
	status, _, res := get(t, srv, "/")
	if status != http.StatusSeeOther || res.Header.Get("Location") != "/runs" {
		t.Fatalf("GET /: %d to %q, want 303 to /runs", status, res.Header.Get("Location"))
	}
	// Keyset paging one run at a time visits every run once, newest first.
	next := "/runs?limit=1"
	var seen []string
	re := regexp.MustCompile(`<a href="/runs/([0-9a-f-]{36})" class="mono">`)
	for i := 0; next != "" && i < 10; i++ {
		status, body, _ := get(t, srv, next)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d", next, status)
		}
		for _, m := range re.FindAllStringSubmatch(body, -1) {
			seen = append(seen, m[1])
		}
		next = ""
		if m := regexp.MustCompile(`<a href="([^"]+)" rel="next">`).FindStringSubmatch(body); m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	want := []string{w.hostile.Meta.RunID, w.live.Meta.RunID, w.failed.Meta.RunID, w.ok.Meta.RunID}
	if strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Fatalf("pages showed %v, want %v", seen, want)
	}
}

// TestHostileInput: bad input is a 4xx page, never a 500, and nothing from
// the request or the store reaches the page unescaped.
func TestHostileInput(t *testing.T) {
	w := newWorld(t)
	srv := w.server(t, nil)
	failed, hostile := w.failed.Meta.RunID, w.hostile.Meta.RunID
	long := strings.Repeat("x", 300)
	cases := []struct {
		name, method, path string
		status             int
	}{
		{"unknown run", "GET", "/runs/00000000-0000-0000-0000-000000000000", 404},
		{"unknown run prefix", "GET", "/runs/" + failed[:8], 404},
		{"run id with markup", "GET", "/runs/" + url.PathEscape("<script>alert(1)</script>"), 404},
		{"run id with control characters", "GET", "/runs/" + url.PathEscape("a\x00b\x1b[31m"), 404},
		{"unknown run's step", "GET", "/runs/nope/steps/model.a", 404},
		{"unknown run's events", "GET", "/runs/nope/events", 404},
		{"unknown step", "GET", "/runs/" + failed + "/steps/model.nope", 404},
		{"step id with markup", "GET", "/runs/" + failed + "/steps/" + url.PathEscape("<script>alert(1)</script>"), 404},
		{"step id with control characters", "GET", "/runs/" + failed + "/steps/" + url.PathEscape("x\x1b]0;pwned\x07"), 404},
		{"hostile step of its run", "GET", "/runs/" + hostile + "/steps/" + url.PathEscape(hostileStep), 200},
		{"hostile run page", "GET", "/runs/" + hostile, 200},
		{"hostile run events", "GET", "/runs/" + hostile + "/events?errors=0", 200},
		{"hostile step filter", "GET", "/runs/" + hostile + "/events?step=" + url.QueryEscape(hostileStep), 200},
		{"unknown status", "GET", "/runs?status=" + url.QueryEscape("<b>BOGUS</b>"), 400},
		{"unknown trigger", "GET", "/runs?trigger=cron", 400},
		{"unknown view", "GET", "/runs?view=all", 400},
		{"bad cursor", "GET", "/runs?after=" + url.QueryEscape("<script>"), 400},
		{"bad since", "GET", "/runs?since=yesterday", 400},
		{"year out of range", "GET", "/runs?until=9999-01-01", 400},
		{"huge limit", "GET", "/runs?limit=100000000000000000000", 400},
		{"long plan", "GET", "/runs?plan=" + long, 400},
		{"control character in a filter", "GET", "/runs?plan=" + url.QueryEscape("a\x1bb"), 400},
		{"huge query", "GET", "/runs?plan=" + strings.Repeat("y", 10000), 414},
		{"bad event type", "GET", "/runs/" + failed + "/events?type=" + url.QueryEscape("<i>x</i>"), 400},
		{"negative after", "GET", "/runs/" + failed + "/events?after=-1", 400},
		{"events limit", "GET", "/runs/" + failed + "/events?limit=0", 400},
		{"errors flag", "GET", "/runs/" + failed + "/events?errors=maybe", 400},
		{"bad Last-Event-ID", "GET", "/runs/" + failed + "/events", 400},
		{"write", "POST", "/runs", 405},
		{"delete", "DELETE", "/runs/" + failed, 405},
		{"unknown page", "GET", "/admin", 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, "/", nil)
			req.Host = "127.0.0.1:8080"
			req.URL, _ = url.Parse(c.path)
			req.RequestURI = c.path
			if c.name == "bad Last-Event-ID" {
				req.Header.Set("Accept", "text/event-stream")
				req.Header.Set("Last-Event-ID", "<script>")
			}
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			body := rec.Body.String()
			if rec.Code != c.status {
				t.Fatalf("%s %s: %d, want %d\n%s", c.method, c.path, rec.Code, c.status, body)
			}
			for _, bad := range []string{"<script>alert", "<img src=x", "<b>BOGUS", "<i>x</i>", "\x1b", "\x00", "\x07"} {
				if strings.Contains(body, bad) {
					t.Errorf("%s %s: the page holds %q unescaped", c.method, c.path, bad)
				}
			}
			if c.status == 200 && c.name == "hostile step of its run" {
				for _, s := range []string{`model.&lt;script&gt;alert(1)&lt;/script&gt;\x1b[31m`, "&lt;img src=x onerror=alert(2)&gt;"} {
					if !strings.Contains(body, s) {
						t.Errorf("the hostile step's page does not show %q", s)
					}
				}
			}
		})
	}
}

func TestAuth(t *testing.T) {
	w := newWorld(t)
	const token, user, pass = "s3cret-token", "ops", "pa:ss"
	basic := func(u, p string) string {
		req := httptest.NewRequest("GET", "/", nil)
		req.SetBasicAuth(u, p)
		return req.Header.Get("Authorization")
	}
	cases := []struct {
		name      string
		auth      console.Auth
		header    string
		status    int
		challenge string
	}{
		{"none configured", console.Auth{}, "", 200, ""},
		{"bearer missing", console.Auth{BearerToken: token}, "", 401, "Bearer"},
		{"bearer wrong", console.Auth{BearerToken: token}, "Bearer nope", 401, "Bearer"},
		{"bearer prefix of the token", console.Auth{BearerToken: token}, "Bearer s3cret", 401, "Bearer"},
		{"bearer right", console.Auth{BearerToken: token}, "Bearer " + token, 200, ""},
		{"basic missing", console.Auth{BasicUser: user, BasicPass: pass}, "", 401, "Basic"},
		{"basic wrong password", console.Auth{BasicUser: user, BasicPass: pass}, basic(user, "pa"), 401, "Basic"},
		{"basic wrong user", console.Auth{BasicUser: user, BasicPass: pass}, basic("root", pass), 401, "Basic"},
		{"basic right", console.Auth{BasicUser: user, BasicPass: pass}, basic(user, pass), 200, ""},
		{"both, bearer used", console.Auth{BearerToken: token, BasicUser: user, BasicPass: pass}, "Bearer " + token, 200, ""},
		{"both, basic used", console.Auth{BearerToken: token, BasicUser: user, BasicPass: pass}, basic(user, pass), 200, ""},
	}
	paths := []string{"/runs", "/runs/" + w.failed.Meta.RunID, "/runs/" + w.failed.Meta.RunID + "/events", "/static/console.css", "/queue"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := w.server(t, func(cfg *console.Config) { cfg.Auth = c.auth })
			for _, p := range paths {
				status, body, res := get(t, srv, p, "Authorization", c.header)
				if status != c.status {
					t.Fatalf("GET %s: %d, want %d", p, status, c.status)
				}
				if got := res.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, c.challenge) || (c.challenge == "") != (got == "") {
					t.Errorf("GET %s: WWW-Authenticate %q, want %q", p, got, c.challenge)
				}
				if strings.Contains(body, token) || strings.Contains(body, pass) {
					t.Errorf("GET %s: the page shows a secret", p)
				}
				// A refused client is not left holding a keep-alive connection.
				if got := res.Header.Get("Connection"); (status == 401) != (got == "close") {
					t.Errorf("GET %s: %d with Connection %q", p, status, got)
				}
			}
		})
	}
}

// sseEvent is one message of an event stream.
type sseEvent struct{ id, event, data string }

// readSSE reads messages from r until it ends or n were read.
func readSSE(r *bufio.Reader, n int) []sseEvent {
	var out []sseEvent
	var cur sseEvent
	for len(out) < n {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if cur.event != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		}
	}
	return out
}

func TestStreamFollowsRunAndResumes(t *testing.T) {
	w := newWorld(t)
	hs := httptest.NewServer(w.server(t, nil))
	defer hs.Close()
	live := w.live
	url := hs.URL + "/runs/" + live.Meta.RunID + "/events"
	open := func(lastID string) *http.Response {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // bounds the whole stream
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		req.Header.Set("Accept", "text/event-stream")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
		}
		return res
	}
	body := bufio.NewReader(open("").Body)
	first := readSSE(body, 3)
	if len(first) != 3 || first[0].id != "1" || first[2].id != "3" || !strings.Contains(first[2].data, `"eventType":"StepStarted"`) {
		t.Fatalf("the stream's first events: %+v", first)
	}
	// The run goes on while the stream is open: its events arrive, then
	// "end" once the run has ended.
	appendEvent(t, w.st, live, ev(engine.StepCompleted, "model.orders", `{"rowsAffected":1}`))
	appendEvent(t, w.st, live, ev(engine.RunCompleted, "", ""))
	rest := readSSE(body, 10)
	got := fmt.Sprint(rest)
	if len(rest) != 3 || rest[0].id != "4" || rest[1].id != "5" || rest[2].event != "end" {
		t.Fatalf("after the run ended the stream sent %s", got)
	}
	// A reconnect resumes after Last-Event-ID: only what it had not seen.
	resumed := readSSE(bufio.NewReader(open("4").Body), 10)
	if len(resumed) != 2 || resumed[0].id != "5" || !strings.Contains(resumed[0].data, "RunCompleted") || resumed[1].event != "end" {
		t.Fatalf("resumed after 4: %+v", resumed)
	}
}

func TestEventsPageBoundedOnABigRun(t *testing.T) {
	w := newWorld(t)
	f := run(t, w.st, "big_plan", map[string]any{"triggeredBy": "ann", "triggerSource": "cli"}, ev(engine.RunStarted, "", ""))
	var batch []engine.RunEventWrite
	for i := range 600 {
		id := fmt.Sprintf("model.m%04d", i)
		batch = append(batch, f.Event(engine.StepStarted, id, 1), f.Event(engine.StepCompleted, id, 1))
	}
	if _, err := w.st.AppendAndEnqueue(ctx, f.Meta.RunID, batch); err != nil {
		t.Fatal(err)
	}
	srv := w.server(t, nil)
	base := "/runs/" + f.Meta.RunID
	rows := regexp.MustCompile(`<tr id="seq-(\d+)">`)
	cases := []struct {
		query string
		rows  int
		first string
		next  string // the next link's after, "" for none
	}{
		{"", 100, "1", "100"},
		{"?after=100", 100, "101", "200"},
		{"?after=1100&limit=500", 102, "1101", ""},
		{"?type=StepCompleted&errors=0&limit=200", 200, "4", "402"},
		{"?step=model.m0599&errors=0", 2, "1201", ""},
	}
	for _, c := range cases {
		status, body, _ := get(t, srv, base+"/events"+c.query)
		if status != 200 {
			t.Fatalf("%s: %d", c.query, status)
		}
		m := rows.FindAllStringSubmatch(body, -1)
		if len(m) != c.rows || m[0][1] != c.first {
			t.Errorf("%s: %d rows from %v, want %d from %s", c.query, len(m), m[0][1], c.rows, c.first)
		}
		next := regexp.MustCompile(`after=(\d+)[^"]*" rel="next"`).FindStringSubmatch(body)
		if (c.next == "") != (next == nil) || next != nil && next[1] != c.next {
			t.Errorf("%s: next %v, want after=%q", c.query, next, c.next)
		}
	}
	// The run page of 600 steps draws 500 and says so.
	status, body, _ := get(t, srv, base)
	if status != 200 || !strings.Contains(body, "Showing 500 of 600 steps") || strings.Count(body, "<tr data-step=") != 500 {
		t.Fatalf("run page of 600 steps: %d, %d step rows", status, strings.Count(body, "<tr data-step="))
	}
}

// TestQueueAndWorkers: the queue page counts the scope's requests; the
// workers page shows each heartbeat, the requests a worker holds and its
// runs' leases, and a worker the queue names without a heartbeat row.
func TestQueueAndWorkers(t *testing.T) {
	w := newWorld(t)
	req := func(id string) queue.Request {
		r := queue.Request{RequestID: "req-" + id, TenantID: "acme", ProjectID: "shop", EnvironmentID: "dev", PlanID: "shop_plan", PlanVersion: "7",
			RunRequestID: id, PlanPath: "plans/shop/plan.yaml", PlanSHA256: "ab12", State: queue.StatePending}
		r.Key = queue.Key(r.TenantID, r.ProjectID, r.EnvironmentID, r.PlanID, r.PlanVersion, r.RunRequestID)
		if _, _, err := w.st.EnqueueRequest(ctx, r, nil); err != nil {
			t.Fatal(err)
		}
		return r
	}
	running := req("a")
	req("b")
	other := queue.Request{RequestID: "req-other", TenantID: "umbrella", ProjectID: "shop", EnvironmentID: "dev", PlanID: "p", PlanVersion: "1",
		RunRequestID: "x", PlanPath: "p.yaml", PlanSHA256: "ab12", State: queue.StatePending}
	other.Key = queue.Key(other.TenantID, other.ProjectID, other.EnvironmentID, other.PlanID, other.PlanVersion, other.RunRequestID)
	if _, _, err := w.st.EnqueueRequest(ctx, other, nil); err != nil {
		t.Fatal(err)
	}
	got, ok, err := w.st.ClaimRequest(ctx, "worker-1", time.Hour, queue.ClaimLimits{})
	if err != nil || !ok || got.RequestID != running.RequestID {
		t.Fatalf("claim: %+v %v %v", got, ok, err)
	}
	live := w.live.Meta.RunID
	if err := w.st.SetRequestRun(ctx, got.RequestID, "worker-1", live); err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.AcquireFencedLease(ctx, live, "worker-1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := w.st.Heartbeat(ctx, "worker-idle", time.Hour); err != nil {
		t.Fatal(err)
	}
	srv := w.server(t, nil)
	for _, c := range []struct {
		path string
		want []string
	}{
		{"/queue", []string{`id="queue-depth">1 waiting, 0 claimed, 1 running`, "req-b", `href="/runs/` + live + `"`}},
		{"/workers", []string{`data-worker="worker-1"`, "✓ live", `href="/runs/` + live + `"`, "lease held by worker-1", `data-worker="worker-idle"`}},
	} {
		status, body, _ := get(t, srv, c.path)
		if status != 200 {
			t.Fatalf("GET %s: %d", c.path, status)
		}
		for _, s := range c.want {
			if !strings.Contains(body, s) {
				t.Errorf("GET %s: no %q in\n%s", c.path, s, body)
			}
		}
		if strings.Contains(body, "req-other") {
			t.Errorf("GET %s shows another tenant's request", c.path)
		}
	}
}

// TestStreamOfAnEndedRun: a stream of a run that has ended sends what the
// browser has not seen, then "end", and closes.
func TestStreamOfAnEndedRun(t *testing.T) {
	w := newWorld(t)
	hs := httptest.NewServer(w.server(t, nil))
	defer hs.Close()
	for _, c := range []struct {
		lastID string
		want   []string // ids, then "end"
	}{
		{"", []string{"1", "2", "3", "4", "5", "6", "7", "end"}},
		{"5", []string{"6", "7", "end"}},
		{"7", []string{"end"}},
	} {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // the stream must close by itself well before
		req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+"/runs/"+w.ok.Meta.RunID+"/events", nil)
		req.Header.Set("Accept", "text/event-stream")
		if c.lastID != "" {
			req.Header.Set("Last-Event-ID", c.lastID)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		evs := readSSE(bufio.NewReader(res.Body), 100)
		res.Body.Close()
		cancel()
		var got []string
		for _, e := range evs {
			if e.event == "end" {
				got = append(got, "end")
			} else {
				got = append(got, e.id)
			}
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("after %q: %v, want %v", c.lastID, got, c.want)
		}
	}
}

// TestVerifyOnRequest: a run with more events than VerifyMaxEvents is not
// verified on load, offers it, and is verified when asked.
func TestVerifyOnRequest(t *testing.T) {
	w := newWorld(t)
	srv := w.server(t, func(c *console.Config) { c.VerifyMaxEvents = 3 })
	path := "/runs/" + w.failed.Meta.RunID
	_, body, _ := get(t, srv, path)
	if !strings.Contains(body, "not verified: 8 events: verified on request") || !strings.Contains(body, `<a href="`+path+`?verify=1">verify now</a>`) {
		t.Fatalf("no offer to verify:\n%s", body)
	}
	_, body, _ = get(t, srv, path+"?verify=1")
	if !strings.Contains(body, "✓ verified: SQL projection == Go reducer (3 steps, 8 events)") {
		t.Fatalf("not verified when asked:\n%s", body)
	}
}

// disagreeing is the store's SQL projection with one step's status
// changed: a projection that drifted from the reducer.
type disagreeing struct{ console.Projector }

func (d disagreeing) ProjectSQL(ctx context.Context, runID string) (engine.Snapshot, error) {
	s, err := d.Projector.ProjectSQL(ctx, runID)
	if err == nil && len(s.Steps) > 0 {
		s.Steps[0].Status = engine.StepStatusRunning
	}
	return s, err
}

func TestIntegrityBadgeShowsADifference(t *testing.T) {
	w := newWorld(t)
	srv := w.server(t, func(c *console.Config) { c.Projector = disagreeing{w.st} })
	_, body, _ := get(t, srv, "/runs/"+w.failed.Meta.RunID)
	if !strings.Contains(body, `class="badge failed" id="integrity"`) || !strings.Contains(body, "✗ 1 difference(s): SQL projection != Go reducer") ||
		!strings.Contains(body, "<td>model.orders</td><td>status</td><td>RUNNING</td><td>SUCCESS</td>") {
		t.Fatalf("the badge does not show the difference:\n%s", body)
	}
}

// TestHostCheck attacks the console as a DNS-rebinding page would: without
// authentication a request naming a foreign Host is refused (421, body
// saying why), while localhost, IP literals and configured names are
// served; with authentication any Host is (the credentials protect it).
func TestHostCheck(t *testing.T) {
	w := newWorld(t)
	cases := []struct {
		name   string
		auth   console.Auth
		hosts  []string
		host   string
		status int
	}{
		{"rebound name", console.Auth{}, nil, "attacker.example:8080", 421},
		{"rebound name without port", console.Auth{}, nil, "evil.test", 421},
		{"suffix of a configured name", console.Auth{}, []string{"dvt.example.com"}, "xdvt.example.com", 421},
		{"localhost", console.Auth{}, nil, "localhost:8080", 200},
		{"localhost, upper case, trailing dot", console.Auth{}, nil, "LOCALHOST.:8080", 200},
		{"IPv4 loopback", console.Auth{}, nil, "127.0.0.1:8080", 200},
		{"IPv6 loopback", console.Auth{}, nil, "[::1]:8080", 200},
		{"listen address", console.Auth{}, nil, "10.1.2.3:9464", 200},
		{"configured name", console.Auth{}, []string{"dvt.example.com"}, "DVT.example.com:443", 200},
		{"empty host", console.Auth{}, nil, "", 421},
		{"any host with a token", console.Auth{BearerToken: "t0k"}, nil, "attacker.example", 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := w.server(t, func(cfg *console.Config) { cfg.Auth, cfg.Hosts = c.auth, c.hosts })
			for _, path := range []string{"/runs", "/runs/" + w.failed.Meta.RunID, "/static/console.css"} {
				req := httptest.NewRequest("GET", path, nil)
				req.Host = c.host
				if c.auth.BearerToken != "" {
					req.Header.Set("Authorization", "Bearer "+c.auth.BearerToken)
				}
				rec := httptest.NewRecorder()
				srv.ServeHTTP(rec, req)
				if rec.Code != c.status {
					t.Fatalf("GET %s with Host %q: %d, want %d", path, c.host, rec.Code, c.status)
				}
				if (c.status == 421) != (rec.Header().Get("Connection") == "close") {
					t.Errorf("GET %s with Host %q: %d with Connection %q", path, c.host, rec.Code, rec.Header().Get("Connection"))
				}
				if c.status == 421 {
					if body := rec.Body.String(); !strings.Contains(body, "answers only to localhost") || strings.Contains(body, w.failed.Meta.RunID) {
						t.Errorf("refusal body does not say why, or leaks a run:\n%s", body)
					}
				}
			}
		})
	}
}

// TestNoStoreAndNoListing: pages and streams are never cached; /static/
// serves its files only, and a directory is 404, not a listing.
func TestNoStoreAndNoListing(t *testing.T) {
	w := newWorld(t)
	srv := w.server(t, nil)
	for _, p := range []string{"/runs", "/runs/" + w.failed.Meta.RunID, "/runs/" + w.failed.Meta.RunID + "/steps/test.positive_amount", "/schedules", "/queue", "/nope"} {
		_, _, res := get(t, srv, p)
		if got := res.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("GET %s: Cache-Control %q, want no-store", p, got)
		}
	}
	for _, p := range []string{"/static/", "/static", "/static/.", "/static/x/", "/static//", "/static/nope.js", "/static/../templates/"} {
		status, body, res := get(t, srv, p)
		if status/100 == 3 { // the mux cleans the path first
			loc := res.Header.Get("Location")
			status, body, _ = get(t, srv, loc)
		}
		if status != 404 {
			t.Errorf("GET %s: %d, want 404", p, status)
		}
		if strings.Contains(body, "console.css") || strings.Contains(body, "live.js") {
			t.Errorf("GET %s lists the directory:\n%s", p, body)
		}
	}
	status, _, res := get(t, srv, "/static/console.css")
	if status != 200 || res.Header.Get("Cache-Control") != "public, max-age=300" {
		t.Errorf("GET /static/console.css: %d, Cache-Control %q", status, res.Header.Get("Cache-Control"))
	}
}

// TestStreamCap: with MaxStreams live streams open, one more is refused
// with 503 and Retry-After; once one closes, a new one is served.
func TestStreamCap(t *testing.T) {
	w := newWorld(t)
	hs := httptest.NewServer(w.server(t, func(c *console.Config) { c.MaxStreams = 2; c.StreamFor = time.Minute }))
	defer hs.Close()
	url := hs.URL + "/runs/" + w.live.Meta.RunID + "/events"
	open := func() (*http.Response, context.CancelFunc) {
		t.Helper()
		rctx, cancel := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(rctx, "GET", url, nil)
		req.Header.Set("Accept", "text/event-stream")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		return res, cancel
	}
	var cancels []context.CancelFunc
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	for i := 0; i < 2; i++ {
		res, cancel := open()
		cancels = append(cancels, cancel)
		if res.StatusCode != 200 {
			t.Fatalf("stream %d: %d", i+1, res.StatusCode)
		}
		readSSE(bufio.NewReader(res.Body), 1) // it is being served
	}
	res, cancel := open()
	body, _ := io.ReadAll(res.Body)
	cancel()
	if res.StatusCode != 503 || res.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "at most 2 live streams") {
		t.Fatalf("third stream: %d, Retry-After %q\n%s", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	// Pages are still served past the cap.
	if pr, err := http.Get(hs.URL + "/runs"); err != nil || pr.StatusCode != 200 {
		t.Fatalf("a page past the stream cap: %v %v", pr, err)
	}
	cancels[0]()
	// The closed stream's slot frees once its handler returns.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, cancel := open()
		cancels = append(cancels, cancel)
		if res.StatusCode == 200 {
			break
		}
		res.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no stream served after one closed: %d", res.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStepSQLKeepsItsLines: a step's SQL is shown as written, line breaks
// and tabs kept (it was one line with literal \n), CRLF as one break, and
// every other control character still made visible.
func TestStepSQLKeepsItsLines(t *testing.T) {
	w := newWorld(t)
	const sqlText = "INSERT INTO t\r\nSELECT 1 \x1b[31mred\x1b[0m\n\t-- done\x07"
	f := run(t, w.st, "shop_plan", map[string]any{"triggeredBy": "ann", "triggerSource": "cli"},
		ev(engine.RunStarted, "", ""), ev(engine.StepStarted, "sql.load", ""),
		ev(engine.StepCompleted, "sql.load", mustJSON(map[string]any{"sql": sqlText, "rowsAffected": 1})), ev(engine.RunCompleted, "", ""))
	status, body, _ := get(t, w.server(t, nil), "/runs/"+f.Meta.RunID+"/steps/sql.load")
	if status != 200 {
		t.Fatalf("step page: %d", status)
	}
	want := "<code>INSERT INTO t\nSELECT 1 \\x1b[31mred\\x1b[0m\n\t-- done\\x07</code>"
	if !strings.Contains(body, want) {
		t.Fatalf("the step page does not show\n%q\nin\n%s", want, body)
	}
	for _, bad := range []string{"\x1b", "\x07", "\r", `t\r\n`, `t\nSELECT`} {
		if strings.Contains(body, bad) {
			t.Errorf("the step page holds %q", bad)
		}
	}
}

// TestGanttCutsLongNames: a step name longer than the Gantt's name column
// is drawn cut with an ellipsis, whole in its <title> and data-step, and
// clipped to the column, so it never runs into the bars and statuses.
func TestGanttCutsLongNames(t *testing.T) {
	w := newWorld(t)
	long := "model." + strings.Repeat("very_long_customer_lifetime_value_", 3) + "end"
	f := run(t, w.st, "shop_plan", map[string]any{"triggeredBy": "ann", "triggerSource": "cli"},
		ev(engine.RunStarted, "", ""), ev(engine.StepStarted, long, ""), ev(engine.StepCompleted, long, `{"rowsAffected":1}`),
		ev(engine.StepStarted, "model.short", ""), ev(engine.RunCompleted, "", ""))
	_, body, _ := get(t, w.server(t, nil), "/runs/"+f.Meta.RunID)
	cut := long[:33] + "…"
	for _, want := range []string{`<clipPath id="gantt-labels"><rect x="0" y="0" width="254"`, `data-step="` + long + `"`,
		`clip-path="url(#gantt-labels)"><title>` + long + `</title>` + cut + `</text>`, `<title>model.short</title>model.short</text>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the run page lacks %q", want)
		}
	}
}

// TestTargets: the console of several targets serves the default one
// until /target picks another (a cookie every later page follows); the
// pick goes back only to a console page, never elsewhere; it is behind
// the same gate as every page; an unknown or unavailable target is 404.
func TestTargets(t *testing.T) {
	w := newWorld(t)
	dev := w.server(t, nil)
	other := w.server(t, func(c *console.Config) { c.EnvironmentID = "production" }) // no runs in it
	m, err := console.NewTargets([]console.Target{{Name: "dev", Server: dev, Default: true}, {Name: "prod", Server: other}, {Name: "qa", Why: "its state store could not be opened"}})
	if err != nil {
		t.Fatal(err)
	}
	_, body, _ := get(t, m, "/runs")
	if !strings.Contains(body, w.ok.Meta.RunID) || !strings.Contains(body, `<a href="/target?name=prod&amp;to=/runs"`) || !strings.Contains(body, `<s title="its state store could not be opened">qa</s>`) {
		t.Fatalf("default target's page:\n%s", body)
	}
	cases := []struct {
		name, path, host string
		status           int
		location         string
	}{
		{"pick prod, back to schedules", "/target?name=prod&to=/schedules", "localhost", 303, "/schedules"},
		{"pick prod, no page", "/target?name=prod", "localhost", 303, "/runs"},
		{"an open redirect is not followed", "/target?name=prod&to=//evil.example/x", "localhost", 303, "/runs"},
		{"an absolute URL is not followed", "/target?name=prod&to=https://evil.example/", "localhost", 303, "/runs"},
		{"unknown target", "/target?name=nope", "localhost", 404, ""},
		{"unavailable target", "/target?name=qa", "localhost", 404, ""},
		{"rebound host", "/target?name=prod", "evil.example", 421, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", c.path, nil)
			req.Host = c.host
			rec := httptest.NewRecorder()
			m.ServeHTTP(rec, req)
			if rec.Code != c.status || rec.Header().Get("Location") != c.location {
				t.Fatalf("GET %s: %d to %q, want %d to %q\n%s", c.path, rec.Code, rec.Header().Get("Location"), c.status, c.location, rec.Body)
			}
			cookies := rec.Result().Cookies()
			if c.status != 303 {
				if len(cookies) != 0 {
					t.Fatalf("a refused pick set %v", cookies)
				}
				return
			}
			if len(cookies) != 1 || cookies[0].Value != "prod" || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteLaxMode || cookies[0].Path != "/" {
				t.Fatalf("cookies %+v", cookies)
			}
			// Every page now shows prod (an environment without runs).
			req = httptest.NewRequest("GET", "/runs", nil)
			req.Host = "localhost"
			req.AddCookie(cookies[0])
			rec = httptest.NewRecorder()
			m.ServeHTTP(rec, req)
			if b := rec.Body.String(); strings.Contains(b, w.ok.Meta.RunID) || !strings.Contains(b, `<strong aria-current="true" title="environment production">prod</strong>`) || !strings.Contains(b, "No runs match in target prod (environment production); the other targets are linked at the top of the page.") {
				t.Fatalf("after picking prod:\n%s", b)
			}
		})
	}
	// A cookie naming no target falls back to the default.
	req := httptest.NewRequest("GET", "/runs", nil)
	req.Host = "localhost"
	req.AddCookie(&http.Cookie{Name: "dvt_target", Value: "qa"})
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, req)
	if !strings.Contains(rec.Body.String(), w.ok.Meta.RunID) {
		t.Fatal("a cookie naming an unavailable target did not fall back to the default")
	}
	if _, err := console.NewTargets([]console.Target{{Name: "qa", Why: "x", Default: true}}); err == nil {
		t.Fatal("a default target without a console was accepted")
	}
}
