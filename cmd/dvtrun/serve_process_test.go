package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/delivery"
)

// TestProcessServeDeliversAndProjects: the real binary's `serve` with a
// JSONL sink runs an enqueued request, delivers the run's events to the
// file in runSeq order, keeps the live snapshot table current (COMPLETED),
// reports delivery and projector lag on /metrics, is ready on /readyz, and
// exits 0 on SIGTERM.
func TestProcessServeDeliversAndProjects(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	h := newHarness(t)
	plan, _ := filepath.Abs(fixture("ok", "plan.yaml"))
	if r := h.run("enqueue", plan, "--request-id", "serve-sinks"); r.code != 0 {
		t.Fatalf("enqueue: %+v", r)
	}
	jsonl := filepath.Join(h.dir, "events.jsonl")
	cfg := h.writeConfig(fmt.Sprintf(`sinks:
  - name: archive
    jsonl: {path: %q}
`, jsonl))
	addr := freeAddr(t)
	env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"], "DVT_CONFIG="+cfg)
	p := startDaemon(t, bin, env, h.dir, "serve", "serve", "--poll", "200ms", "--http", addr)

	st := openTestStore(t, h)
	ctx := context.Background()
	var runID string
	waitUntil(t, "the request to finish", func() bool {
		list, err := st.ListRequests(ctx, true)
		if err != nil || len(list) != 1 || list[0].Outcome == "" {
			return false
		}
		runID = list[0].RunID
		return true
	})
	evs, err := st.ListEvents(ctx, runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s := engine.Project(runID, evs); s.Status != engine.StatusCompleted {
		t.Fatalf("run %s is %s\n%s", runID, s.Status, p.logText())
	}
	var lines []engine.RunEventRecord
	waitUntil(t, "every event in the JSONL file", func() bool {
		var err error
		lines, err = delivery.ReadJSONL(jsonl) // a line being written fails: wait
		return err == nil && len(lines) >= len(evs)
	})
	if len(lines) != len(evs) {
		t.Fatalf("%d records in the file for %d events", len(lines), len(evs))
	}
	for i, rec := range lines {
		if rec.RunID != runID || rec.RunSeq != evs[i].RunSeq || rec.EventID != evs[i].EventID {
			t.Fatalf("record %d: run %s runSeq %d event %s; want run %s runSeq %d event %s",
				i, rec.RunID, rec.RunSeq, rec.EventID, runID, evs[i].RunSeq, evs[i].EventID)
		}
	}
	waitUntil(t, "the live snapshot to say COMPLETED", func() bool {
		state, _, err := st.LoadSnapshot(ctx, runID)
		if err != nil {
			return false
		}
		s, err := engine.UnmarshalSnapshotState(state)
		return err == nil && s.Status == engine.StatusCompleted && s.LastEventSeq == evs[len(evs)-1].RunSeq
	})
	if code, body := get("http://" + addr + "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
	// The sink's file holds a batch before the service has recorded it
	// delivered and counted it: wait for the count, not just the file.
	want := regexp.MustCompile(fmt.Sprintf(`(?m)^dvtrun_delivery_total\{outcome="delivered"\} %d$`, len(evs)))
	var metrics string
	waitUntil(t, "/metrics to count every event delivered", func() bool {
		_, metrics = get("http://" + addr + "/metrics")
		return want.MatchString(metrics)
	})
	if !want.MatchString(metrics) || !strings.Contains(metrics, `dvtrun_delivery_total{outcome="dead"} 0`) ||
		!strings.Contains(metrics, "dvtrun_projector_lag_seconds ") {
		t.Errorf("/metrics lacks the delivery counts (%d delivered) or the projector lag:\n%s", len(evs), metrics)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("serve exited %d on SIGTERM\n%s", code, p.logText())
	}
	if log := p.logText(); !strings.Contains(log, `"msg":"delivery started"`) || !strings.Contains(log, `"msg":"stopped"`) {
		t.Errorf("logs:\n%s", log)
	}
}
