package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/console"
)

// chromiumPath is Debian's Chromium, which .ci/run installs when missing.
const chromiumPath = "/usr/bin/chromium"

// browser starts a headless Chromium for the test, or skips saying why
// (fails under CI=true, where Chromium must be installed). The flags keep
// it off the network: without them it waits on update and sync services
// this closed network never answers.
func browser(t *testing.T) (context.Context, context.CancelFunc) {
	t.Helper()
	unavailable := func(why string) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no browser: %s", why)
		}
		t.Skipf("no browser: %s (install the chromium package; .ci/run does)", why)
	}
	if _, err := exec.LookPath(chromiumPath); err != nil {
		unavailable(chromiumPath + " is not installed")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	// The whole browser session is bounded; each step has stepTimeout.
	ctx, cancelTimeout := context.WithTimeout(context.Background(), 3*time.Minute)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	cancel := func() { cancelBrowser(); cancelAlloc(); cancelTimeout() }
	if err := chromedp.Do(bctx); err != nil {
		cancel()
		unavailable("chromium did not start: " + err.Error())
	}
	return bctx, cancel
}

// artifactsDir is where screenshots go: $DVT_CONSOLE_ARTIFACTS, else the
// test's temporary directory.
func artifactsDir(t *testing.T) string {
	if d := os.Getenv("DVT_CONSOLE_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// attrs maps one attribute of every element a CSS selector matches to
// another's (data-step to data-status).
func attrs(sel, key, val string) chromedp.Action[map[string]string] {
	return chromedp.Evaluate[map[string]string](`Object.fromEntries(Array.from(document.querySelectorAll(` + quoteJS(sel) + `)).map(e => [e.getAttribute(` + quoteJS(key) + `), e.getAttribute(` + quoteJS(val) + `)]))`)
}

func quoteJS(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }

// waitFor polls a JavaScript condition until it holds, for at most 15s.
func waitFor(cond string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(15*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))(ctx, t)
		return err
	})
}

// colorScheme makes the page prefer a colour scheme, as the OS setting does.
func colorScheme(v string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: v}}})
		return err
	})
}

// stepTimeout bounds each step of a browser test: loading a page and
// waiting for what it should show.
const stepTimeout = 20 * time.Second

// get1 runs one action, failing the test on its error.
func get1[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// do runs actions that return nothing.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestBrowser(t *testing.T) {
	bctx, cancel := browser(t)
	defer cancel()
	w := newWorld(t)
	hs := httptest.NewServer(w.server(t, nil))
	defer hs.Close()
	failed, live := w.failed.Meta.RunID, w.live.Meta.RunID
	statuses := chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('table.runs tbody tr')).map(r => r.dataset.status)`)

	t.Run("runs, filtered to failed", func(t *testing.T) {
		do(t, bctx, "load /", chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`table.runs`)))
		all := get1(t, bctx, "read the runs", statuses)
		do(t, bctx, "filter to failed", chromedp.Click(chromedp.CSS(`#only-failed`)),
			chromedp.WaitReady(chromedp.CSS(`select[name=status] option[selected]`)),
			chromedp.WaitVisible(chromedp.CSS(`table.runs`)))
		filtered := get1(t, bctx, "read the failed runs", statuses)
		if loc := get1(t, bctx, "location", chromedp.Location()); !strings.HasSuffix(loc, "/runs?status=FAILED") {
			t.Errorf("the filtered page's deep link is %s", loc)
		}
		if len(all) != 4 {
			t.Fatalf("the runs page lists %v, want the 4 runs", all)
		}
		if len(filtered) != 2 || filtered[0] != "FAILED" || filtered[1] != "FAILED" {
			t.Fatalf("filtered to failed: %v", filtered)
		}
	})

	t.Run("run page: Gantt and DAG with the right statuses, light and dark", func(t *testing.T) {
		do(t, bctx, "open the failed run", chromedp.Navigate(hs.URL+"/runs?status=FAILED"),
			chromedp.Click(chromedp.CSS(`table.runs a[href="/runs/`+failed+`"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#dag`)), chromedp.WaitVisible(chromedp.CSS(`#gantt`)))
		dagStatus := get1(t, bctx, "DAG statuses", attrs(`#dag g.node`, "data-step", "data-status"))
		ganttStatus := get1(t, bctx, "Gantt rows", attrs(`#gantt g.row`, "data-step", "data-status"))
		background := chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`)
		do(t, bctx, "light", colorScheme("light"))
		bgLight := get1(t, bctx, "light background", background)
		light := get1(t, bctx, "light screenshot", chromedp.FullScreenshot(100))
		do(t, bctx, "dark", colorScheme("dark"))
		bgDark := get1(t, bctx, "dark background", background)
		dark := get1(t, bctx, "dark screenshot", chromedp.FullScreenshot(100))
		do(t, bctx, "back to light", colorScheme("light"))

		wantDAG := map[string]string{"seed.customers": "PENDING", "model.orders": "SUCCESS", "test.positive_amount": "FAILED", "model.report": "SKIPPED"}
		for step, want := range wantDAG {
			if dagStatus[step] != want {
				t.Errorf("DAG: %s is %q, want %s (all: %v)", step, dagStatus[step], want, dagStatus)
			}
		}
		if !strings.HasPrefix(ganttStatus["queue wait"], "waited ") || !strings.HasPrefix(ganttStatus["run"], "FAILED") ||
			!strings.HasPrefix(ganttStatus["test.positive_amount"], "FAILED") || !strings.HasPrefix(ganttStatus["model.orders"], "SUCCESS") ||
			ganttStatus["model.report"] != "SKIPPED" {
			t.Errorf("Gantt rows: %v", ganttStatus)
		}
		if bgLight != "rgb(255, 255, 255)" || bgDark != "rgb(13, 17, 23)" {
			t.Errorf("prefers-color-scheme: light background %s, dark %s", bgLight, bgDark)
		}
		dir := artifactsDir(t)
		for name, png := range map[string][]byte{"run-light.png": light, "run-dark.png": dark} {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("screenshot: %s (%d bytes)", p, len(png))
		}
	})

	t.Run("keyboard: the first Tab reaches the skip link", func(t *testing.T) {
		do(t, bctx, "open the run", chromedp.Navigate(hs.URL+"/runs/"+failed), chromedp.WaitVisible(chromedp.CSS(`#dag`)), chromedp.KeyEvent(kb.Tab))
		focused := get1(t, bctx, "focus", chromedp.Evaluate[string](`document.activeElement.className + ' ' + document.activeElement.getAttribute('href')`))
		if focused != "skip #main" {
			t.Errorf("after Tab the focus is on %q, want the skip link", focused)
		}
	})

	t.Run("a live run followed to completion over SSE", func(t *testing.T) {
		do(t, bctx, "open the live run", chromedp.Navigate(hs.URL+"/runs/"+live), chromedp.WaitVisible(chromedp.CSS(`#run-status`)))
		before := get1(t, bctx, "status", chromedp.Text(chromedp.CSS(`#run-status`)))
		// The run goes on after the page loaded: nothing reloads the page
		// but the stream.
		appendEvent(t, w.st, w.live, ev(engine.StepCompleted, "model.orders", `{"rowsAffected":1}`))
		appendEvent(t, w.st, w.live, ev(engine.RunCompleted, "", ""))
		do(t, bctx, "follow the run to its end",
			waitFor(`document.querySelector('#run-status').textContent.includes('COMPLETED')`),
			waitFor(`document.documentElement.dataset.runEnded === 'true'`),
			waitFor(`document.querySelector('#dag g.node[data-step="model.orders"]').dataset.status === 'SUCCESS'`))
		after := get1(t, bctx, "status", chromedp.Text(chromedp.CSS(`#run-status`)))
		if !strings.Contains(before, "RUNNING") || !strings.Contains(after, "COMPLETED") {
			t.Errorf("status %q then %q", before, after)
		}
	})

	t.Run("a failing step's SQL and error", func(t *testing.T) {
		do(t, bctx, "open the failing step", chromedp.Navigate(hs.URL+"/runs/"+failed), chromedp.WaitVisible(chromedp.CSS(`table.steps`)),
			chromedp.Click(chromedp.CSS(`table.steps a[href="/runs/`+failed+`/steps/test.positive_amount"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#step-sql`)))
		sqlText := get1(t, bctx, "SQL", chromedp.Text(chromedp.CSS(`#step-sql`)))
		errText := get1(t, bctx, "error", chromedp.Text(chromedp.CSS(`#step-error`)))
		status := get1(t, bctx, "status", chromedp.Text(chromedp.CSS(`#step-status`)))
		if strings.TrimSpace(sqlText) != failingSQL || !strings.Contains(errText, failingMsg) || !strings.Contains(errText, "TEST_FAILED") || !strings.Contains(status, "FAILED") {
			t.Errorf("step page: SQL %q, error %q, status %q", sqlText, errText, status)
		}
		// The SQL's lines are lines on the page, not one line with \n.
		lines := get1(t, bctx, "SQL lines", chromedp.Evaluate[int](`Math.round(document.querySelector('#step-sql').getBoundingClientRect().height / parseFloat(getComputedStyle(document.querySelector('#step-sql code')).lineHeight || 16))`))
		if strings.Contains(sqlText, `\n`) || lines < 3 {
			t.Errorf("the SQL is drawn on %d line(s): %q", lines, sqlText)
		}
		png := get1(t, bctx, "step screenshot", chromedp.FullScreenshot(100))
		writeArtifact(t, "step-sql.png", png)
	})

	t.Run("long step names: cut in the Gantt, whole in the tooltip; multi-line SQL on the step page", func(t *testing.T) {
		long := "model." + strings.Repeat("very_long_customer_lifetime_value_", 3) + "end"
		failing := "test." + strings.Repeat("not_null_orders_customer_id_", 3) + "check"
		sqlText := "CREATE TABLE clv AS\nSELECT customer_id,\n       sum(amount) AS lifetime_value\nFROM orders\nGROUP BY customer_id"
		f := run(t, w.st, "shop_plan", map[string]any{"triggeredBy": "ann", "triggerSource": "cli"},
			ev(engine.RunStarted, "", ""), ev(engine.StepStarted, long, ""),
			ev(engine.StepCompleted, long, mustJSON(map[string]any{"sql": sqlText, "rowsAffected": 42})),
			ev(engine.StepStarted, failing, ""),
			ev(engine.StepFailed, failing, `{"error":{"code":"TEST_FAILED","message":"2 rows"}}`),
			ev(engine.StepStarted, "model.short", ""), ev(engine.StepCompleted, "model.short", `{"rowsAffected":1}`),
			ev(engine.RunFailed, "", `{"error":{"code":"STEP_FAILED","message":"1 step failed"}}`))
		do(t, bctx, "open the run", chromedp.Navigate(hs.URL+"/runs/"+f.Meta.RunID), chromedp.WaitVisible(chromedp.CSS(`#gantt`)))
		// Each name ends before the column's edge (the bars start at 260),
		// and before its status text; the tooltip holds it whole.
		type label struct {
			Step  string  `json:"step"`
			Title string  `json:"title"`
			Right float64 `json:"right"`
			Text  float64 `json:"text"` // the status text's left edge
		}
		labels := get1(t, bctx, "Gantt labels", chromedp.Evaluate[[]label](`Array.from(document.querySelectorAll('#gantt g.row')).map(g => {
			const l = g.querySelector('text.label'), s = g.querySelector('text.bartext'), t = l.querySelector('title');
			return {step: g.dataset.step, title: t ? t.textContent : '', right: l.getBBox().x + l.getComputedTextLength(), text: s.getBBox().x};
		})`))
		seen := 0
		for _, l := range labels {
			if l.Right > 256 || l.Right >= l.Text {
				t.Errorf("Gantt row %s: its name ends at %.0f, its status starts at %.0f", l.Step, l.Right, l.Text)
			}
			if l.Step == long || l.Step == failing {
				seen++
				if l.Title != l.Step {
					t.Errorf("Gantt row %s: tooltip %q", l.Step, l.Title)
				}
			}
		}
		if seen != 2 {
			t.Fatalf("the Gantt shows %d of the 2 long names: %+v", seen, labels)
		}
		writeArtifact(t, "gantt-long-names.png", get1(t, bctx, "Gantt screenshot", chromedp.Screenshot(chromedp.CSS(`figure.gantt`))))
		writeArtifact(t, "run-long-names.png", get1(t, bctx, "run screenshot", chromedp.FullScreenshot(100)))

		do(t, bctx, "open the long step", chromedp.Navigate(hs.URL+"/runs/"+f.Meta.RunID+"/steps/"+long), chromedp.WaitVisible(chromedp.CSS(`#step-sql`)))
		got := get1(t, bctx, "SQL", chromedp.Evaluate[string](`document.querySelector('#step-sql').innerText`))
		if strings.TrimSpace(got) != sqlText {
			t.Errorf("the step page shows the SQL as %q, want %q", got, sqlText)
		}
		writeArtifact(t, "step-long-name.png", get1(t, bctx, "step screenshot", chromedp.FullScreenshot(100)))
	})
}

// writeArtifact writes a screenshot to artifactsDir and logs its path.
func writeArtifact(t *testing.T, name string, png []byte) {
	t.Helper()
	p := filepath.Join(artifactsDir(t), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", p, len(png))
}

// TestBrowserStreamCap: a run page whose live stream the console refused
// (its stream cap reached) tries again later, and follows the run once a
// stream is free.
func TestBrowserStreamCap(t *testing.T) {
	bctx, cancel := browser(t)
	defer cancel()
	w := newWorld(t)
	hs := httptest.NewServer(w.server(t, func(c *console.Config) { c.MaxStreams = 1 }))
	defer hs.Close()
	other := run(t, w.st, "shop_plan", map[string]any{"triggeredBy": "bob", "triggerSource": "cli"},
		ev(engine.RunStarted, "", ""), ev(engine.StepStarted, "model.orders", ""))
	// Another page holds the only stream.
	sctx, stop := context.WithCancel(context.Background())
	defer stop()
	req, _ := http.NewRequestWithContext(sctx, "GET", hs.URL+"/runs/"+other.Meta.RunID+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("the first stream: %v %v", res, err)
	}
	defer res.Body.Close()
	do(t, bctx, "open the live run", chromedp.Navigate(hs.URL+"/runs/"+w.live.Meta.RunID), chromedp.WaitVisible(chromedp.CSS(`#run-status`)),
		waitFor(`document.documentElement.dataset.liveRetry === 'true'`))
	stop() // the slot frees
	appendEvent(t, w.st, w.live, ev(engine.StepCompleted, "model.orders", `{"rowsAffected":1}`))
	appendEvent(t, w.st, w.live, ev(engine.RunCompleted, "", ""))
	do(t, bctx, "follow the run once a stream is free",
		waitFor(`document.querySelector('#run-status').textContent.includes('COMPLETED')`),
		waitFor(`document.documentElement.dataset.runEnded === 'true'`))
}
