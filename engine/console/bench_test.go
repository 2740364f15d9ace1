package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/sqlite"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// bigRunSteps makes a run of 2 + 2*25,000 = 50,002 events.
const bigRunSteps = 25000

// bigRun is a SQLite store holding one completed run of 50,002 events,
// its live snapshot saved as a worker's projector keeps it (saved says
// whether it is).
func bigRun(b *testing.B, saved bool) (*world, *storetest.Fixture) {
	b.Helper()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "state.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	f := run(b, st, "big_plan", map[string]any{"triggeredBy": "ann", "triggerSource": "cli"}, ev(engine.RunStarted, "", ""))
	var batch []engine.RunEventWrite
	for i := range bigRunSteps {
		id := fmt.Sprintf("model.m%05d", i)
		batch = append(batch, f.Event(engine.StepStarted, id, 1), f.Event(engine.StepCompleted, id, 1))
		if len(batch) == 2000 {
			if _, err := st.AppendAndEnqueue(ctx, f.Meta.RunID, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	appendEvent(b, st, f, ev(engine.RunCompleted, "", ""))
	if saved {
		evs, err := st.ListEvents(ctx, f.Meta.RunID, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		if ok, err := st.SaveSnapshot(ctx, engine.Project(f.Meta.RunID, evs), 0); err != nil || !ok {
			b.Fatalf("save the snapshot: %v %v", ok, err)
		}
	}
	return &world{st: st, ok: f}, f
}

// timedGet fetches url and returns the time to its first byte and to its
// last, and the body.
func timedGet(b *testing.B, url string) (first, full time.Duration, body string) {
	var got time.Time
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { got = time.Now() }}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), "GET", url, nil)
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 {
		b.Fatalf("GET %s: %d %v", url, res.StatusCode, err)
	}
	return got.Sub(start), time.Since(start), string(raw)
}

// BenchmarkBigRun loads the pages of a 50,002-event run (25,000 steps)
// over HTTP and reports the median time to the first byte and to the
// full page; a median over its bound (README's figures) fails it. A page
// is rendered whole before it is sent (an error never leaves half a
// page), so the first byte comes with the rest. The run page draws 500
// steps and the events page one page of the log, never all of it.
func BenchmarkBigRun(b *testing.B) {
	for _, c := range []struct {
		name  string
		saved bool
		path  func(runID string) string
		// maxRows bounds the rows the page renders: never the whole log.
		rowMark string
		maxRows int
		// bound is the page's full-load bound (median), README's figure.
		bound time.Duration
	}{
		{"run page with live snapshot", true, func(id string) string { return "/runs/" + id }, "<tr data-step=", 500, 500 * time.Millisecond},
		{"run page without snapshot", false, func(id string) string { return "/runs/" + id }, "<tr data-step=", 500, 2 * time.Second},
		{"events page", true, func(id string) string { return "/runs/" + id + "/events?after=40000" }, `<tr id="seq-`, 100, 100 * time.Millisecond},
		{"events page filtered", true, func(id string) string { return "/runs/" + id + "/events?type=RunCompleted&errors=0&after=40000" }, `<tr id="seq-`, 1, 500 * time.Millisecond},
		{"step page", true, func(id string) string { return "/runs/" + id + "/steps/model.m24999" }, "<tr>", 10, 500 * time.Millisecond},
	} {
		b.Run(c.name, func(b *testing.B) {
			w, f := bigRun(b, c.saved)
			hs := httptest.NewServer(w.server(b, nil))
			defer hs.Close()
			url := hs.URL + c.path(f.Meta.RunID)
			var firsts, fulls []time.Duration
			b.ResetTimer()
			for b.Loop() {
				first, full, body := timedGet(b, url)
				firsts, fulls = append(firsts, first), append(fulls, full)
				if n := strings.Count(body, c.rowMark); n == 0 || n > c.maxRows {
					b.Fatalf("%s rendered %d rows, want 1 to %d", url, n, c.maxRows)
				}
				b.SetBytes(int64(len(body)))
			}
			b.ReportMetric(median(firsts).Seconds()*1000, "ms-first-byte")
			b.ReportMetric(median(fulls).Seconds()*1000, "ms-full-load")
			if m := median(fulls); m > c.bound {
				b.Errorf("%s: median full load %v, over the bound %v README states", c.name, m, c.bound)
			}
		})
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
