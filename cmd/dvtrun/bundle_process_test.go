package main

import (
	"context"
	"database/sql"
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
		if e.IsDir() {
			continue // copied by its own call
		}
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
	t.Parallel()
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

// TestProcessStoredBundles is issue 20's must-show for stored bundles: a
// scheduler, two workers and `retry` each run in a directory of their own,
// none of them the plans', and the plans' directory is removed once the
// requests are enqueued. Every run completes from the stored bundles (seeds
// included); a worker killed mid-run is taken over by the other, in another
// directory tree, from the bundle; `retry` of the one run that failed (its
// table was missing from the warehouse) completes without a PLAN, and `plan
// show` prints a file of what it ran.
func TestProcessStoredBundles(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	h := newHarness(t)
	root := h.dir
	project := filepath.Join(root, "project")
	copyPlan(t, "ok", filepath.Join(project, "shop"))
	copyPlan(t, "gate", filepath.Join(project, "gate"))
	copyPlan(t, "gate/models", filepath.Join(project, "gate", "models"))
	copyPlan(t, "crash", filepath.Join(project, "crash"))
	mkdirs(t, root, "a/scheduler", "b/worker1", "c/worker2", "d/retry")
	cfg := "schedules:\n  - {name: every-second, cron: \"@every 1s\", plan: shop/plan.yaml, overlap: buffer_all, catchupWindow: 1m}\n"
	if err := os.WriteFile(filepath.Join(project, "dvtrun.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"])
	ctx := context.Background()
	st := openTestStore(t, h)

	// The scheduler reads its config by a path relative to its own directory.
	sched := startDaemon(t, bin, env, filepath.Join(root, "a/scheduler"), "scheduler", "scheduler", "--config", "../../project/dvtrun.yaml", "--poll", "200ms")
	waitUntil(t, "3 ticks of every-second", func() bool {
		c, ok, err := st.GetCursor(ctx, "every-second")
		return err == nil && ok && c.Fired >= 3
	})
	if code := sched.stop(t); code != 0 {
		t.Fatalf("scheduler exited %d\n%s", code, sched.logText())
	}
	// Enqueued from the project by relative paths; the crash plan first.
	for _, args := range [][]string{{"enqueue", "crash/plan.yaml", "--priority", "10"}, {"enqueue", "gate/plan.yaml"}} {
		if r := runIn(t, bin, env, project, args...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	if err := os.RemoveAll(project); err != nil {
		t.Fatal(err)
	}

	wargs := []string{"worker", "--poll", "200ms", "--lease-ttl", "2s", "--grace", "1s", "--slots", "1"}
	victim := startDaemon(t, bin, env, filepath.Join(root, "b/worker1"), "worker1", wargs...)
	var crashRun string
	waitUntil(t, "worker1's second StepStarted of the crash plan", func() bool {
		list, err := st.ListRequests(ctx, false)
		if err != nil {
			return false
		}
		for _, r := range list {
			if r.PlanID != "cli_effects" || r.State != queue.StateRunning || r.RunID == "" {
				continue
			}
			evs, err := st.ListEvents(ctx, r.RunID, 0, 0)
			n := 0
			for _, e := range evs {
				if e.EventType == engine.StepStarted {
					n++
				}
			}
			crashRun = r.RunID
			return err == nil && n >= 2
		}
		return false
	})
	victim.cmd.Process.Kill()
	<-victim.done
	heir := startDaemon(t, bin, env, filepath.Join(root, "c/worker2"), "worker2", wargs...)
	waitUntil(t, "every request to finish", func() bool {
		list, err := st.ListRequests(ctx, false)
		return err == nil && len(list) == 0
	})
	if code := heir.stop(t); code != 0 {
		t.Errorf("worker2 exited %d\n%s", code, heir.logText())
	}
	list, err := st.ListRequests(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	var gateRun string
	for _, r := range list {
		want := string(engine.StatusCompleted)
		if r.PlanID == "cli_gate" {
			want, gateRun = string(engine.StatusFailed), r.RunID
		}
		if r.State != queue.StateDone || r.Outcome != want {
			t.Errorf("request %s (plan %s): %s %s, want DONE %s\nworker1:\n%s\nworker2:\n%s", r.RequestID, r.PlanID, r.State, r.Outcome, want, victim.logText(), heir.logText())
		}
		if r.RunID == crashRun && r.Attempts < 2 {
			t.Errorf("the crash run %s was not taken over (attempts %d)", crashRun, r.Attempts)
		}
	}
	if len(list) < 5 || gateRun == "" || crashRun == "" {
		t.Fatalf("%d requests (gate run %q, crash run %q): want 3+ scheduled, the crash and the gate plan", len(list), gateRun, crashRun)
	}

	// What the gate plan's model needs, made outside the plan.
	wh, err := sql.Open("sqlite", h.warehousePath())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wh.Exec("CREATE TABLE gate (open INTEGER); INSERT INTO gate VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	wh.Close()
	elsewhere := filepath.Join(root, "d/retry")
	r := runIn(t, bin, env, elsewhere, "retry", gateRun)
	if r.code != 0 || !strings.Contains(r.stdout, "Retrying 1 step(s) of run "+gateRun+": model.gated") {
		t.Fatalf("retry %s: %+v", gateRun, r)
	}
	if r := runIn(t, bin, env, elsewhere, "plan", "show", gateRun, "--file", "models/gated.sql"); r.code != 0 || !strings.Contains(r.stdout, "join gate g on g.open = 1") {
		t.Fatalf("plan show --file: %+v", r)
	}
	runs, err := st.ListRuns(ctx, storeFilterAll())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range runs {
		evs, err := st.ListEvents(ctx, m.RunID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		s := engine.Project(m.RunID, evs)
		if m.RunID == gateRun {
			continue // FAILED, checked above; its retry is a run of its own
		}
		if s.Status != engine.StatusCompleted {
			t.Errorf("run %s (plan %s) is %s", m.RunID, m.PlanID, s.Status)
		}
	}
	if len(runs) != len(list)+1 {
		t.Errorf("%d runs for %d requests and one retry", len(runs), len(list))
	}
	t.Logf("%d runs from stored bundles; crash run %s taken over", len(runs), crashRun)
}
