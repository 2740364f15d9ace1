package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
)

// runIn runs the binary in dir, bounded by a minute.
func runIn(t *testing.T, bin string, env []string, dir string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env, cmd.Dir = env, dir
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return result{code, out.String(), errb.String()}
}

// copyPlan copies testdata/<name> into dir.
func copyPlan(t *testing.T, name, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(fixture(name))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(fixture(name, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func mkdirs(t *testing.T, root string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(root, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProcessRelativePlanPath is issue 20's Found 1: `schedule trigger
// --config daemon/dvtrun.yaml` from the directory above daemon/ records the
// plan as daemon/shop/plan.yaml; a worker started in daemon/ must still run
// it (it was REFUSED: PLAN_INVALID cannot read plan), and `retry RUN_ID`
// from a third directory must find it.
func TestProcessRelativePlanPath(t *testing.T) {
	bin := buildBinary(t)
	h := newHarness(t)
	root := h.dir
	copyPlan(t, "ok", filepath.Join(root, "daemon", "shop"))
	mkdirs(t, root, "elsewhere")
	cfg := "schedules:\n  - {name: shop-nightly, cron: \"0 3 * * *\", timezone: UTC, plan: shop/plan.yaml}\n"
	if err := os.WriteFile(filepath.Join(root, "daemon", "dvtrun.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"])
	if r := runIn(t, bin, env, root, "schedule", "trigger", "shop-nightly", "--config", "daemon/dvtrun.yaml"); r.code != 0 {
		t.Fatalf("schedule trigger: %+v", r)
	}
	st := openTestStore(t, h)
	w := startDaemon(t, bin, env, filepath.Join(root, "daemon"), "worker", "worker", "--poll", "200ms")
	var req queue.Request
	waitUntil(t, "the worker to finish the request", func() bool {
		list, err := st.ListRequests(context.Background(), true)
		if err != nil || len(list) != 1 {
			return false
		}
		req = list[0]
		return req.State == queue.StateDone
	})
	if code := w.stop(t); code != 0 {
		t.Errorf("worker exited %d\n%s", code, w.logText())
	}
	if req.Outcome != string(engine.StatusCompleted) {
		t.Fatalf("request %s ended %s, want COMPLETED\n%s", req.RequestID, req.Outcome, w.logText())
	}
	r := runIn(t, bin, env, filepath.Join(root, "elsewhere"), "retry", req.RunID)
	if r.code != 0 || !strings.Contains(r.stdout, "Nothing to retry") {
		t.Fatalf("retry %s from another directory: %+v", req.RunID, r)
	}
}
