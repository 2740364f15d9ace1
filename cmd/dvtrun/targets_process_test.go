package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
)

// TestProcessBackfillOnTargets is issue 20's backfill must-show, with
// targets and directories: the config (dev and prod targets, paths
// relative to it) lives in project/; `schedule backfill` of seven daily
// ticks runs from a/, the plan's directory is removed, and two workers in
// other directory trees (b/, c/) run the seven requests on prod. Each run
// loads its own interval's day into the incremental model `daily` (seven
// distinct partitions) and logs one load per day; the first worker is
// SIGKILLed mid-run and the second resumes that run, which loads the same
// interval, once. dev's warehouse is never touched; `retry` from d/ finds
// the runs on prod.
func TestProcessBackfillOnTargets(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	h := newHarness(t)
	root := h.dir
	project := filepath.Join(root, "project")
	copyPlan(t, "backfill", filepath.Join(project, "backfill"))
	mkdirs(t, root, "a/backfill", "b/worker1", "c/deep/worker2", "d/retry")
	cfg := `target: dev
targets:
  dev:  {store: "sqlite:state/state.db", warehouse: "sqlite:wh/dev.db"}
  prod: {store: "sqlite:state/state.db", warehouse: "sqlite:wh/prod.db", environment: prod}
schedules:
  - {name: daily-load, cron: "0 0 * * *", timezone: Europe/Berlin, plan: backfill/plan.yaml, target: prod, vars: {region: eu}}
`
	if err := os.WriteFile(filepath.Join(project, "dvtrun.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// No DVT_STORE or DVT_WAREHOUSE: the target says where.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DVT_") {
			env = append(env, kv)
		}
	}
	h.env["DVT_STORE"] = "sqlite:" + filepath.Join(project, "state", "state.db") // the test's own reads
	prodWH, devWH := filepath.Join(project, "wh", "prod.db"), filepath.Join(project, "wh", "dev.db")
	ctx := context.Background()

	r := runIn(t, bin, env, filepath.Join(root, "a/backfill"), "--config", "../../project/dvtrun.yaml", "--target", "prod",
		"schedule", "backfill", "daily-load", "--from", "2026-03-25T00:00:00+01:00", "--to", "2026-03-31T00:00:00+02:00")
	if r.code != 0 || !strings.Contains(r.stdout, "7 tick(s)") || !strings.Contains(r.stderr, "target prod") {
		t.Fatalf("backfill: %+v", r)
	}
	if err := os.RemoveAll(filepath.Join(project, "backfill")); err != nil {
		t.Fatal(err)
	}
	st := openTestStore(t, h)

	wargs := []string{"--config", "../../project/dvtrun.yaml", "--target", "prod", "worker", "--poll", "200ms", "--lease-ttl", "2s", "--grace", "1s", "--slots", "1"}
	victim := startDaemon(t, bin, env, filepath.Join(root, "b/worker1"), "worker1", wargs...)
	var crashRun string
	waitUntil(t, "worker1 to start the slow step of a run after a completed one", func() bool {
		list, err := st.ListRequests(ctx, true)
		if err != nil {
			return false
		}
		done := 0
		for _, r := range list {
			if r.State == queue.StateDone {
				done++
			}
		}
		for _, r := range list {
			if done == 0 || r.State != queue.StateRunning || r.RunID == "" {
				continue
			}
			evs, err := st.ListEvents(ctx, r.RunID, 0, 0)
			if err != nil {
				return false
			}
			for _, e := range evs {
				if e.EventType == engine.StepStarted && e.StepID == "sql.slow" {
					crashRun = r.RunID
					return true
				}
			}
		}
		return false
	})
	victim.cmd.Process.Kill()
	<-victim.done
	// Deeper in another tree: its config path has one more "..".
	heir := startDaemon(t, bin, env, filepath.Join(root, "c/deep/worker2"), "worker2", append([]string{"--config", "../../../project/dvtrun.yaml"}, wargs[2:]...)...)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		list, err := st.ListRequests(ctx, false)
		if err == nil && len(list) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for every request to finish: %+v\nworker1:\n%s\nworker2:\n%s", list, victim.logText(), heir.logText())
		}
	}
	if code := heir.stop(t); code != 0 {
		t.Errorf("worker2 exited %d\n%s", code, heir.logText())
	}
	list, err := st.ListRequests(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 7 {
		t.Fatalf("%d requests, want 7", len(list))
	}
	intervals := map[string]string{} // run -> its interval's local day
	var crashDay string
	for _, r := range list {
		if r.State != queue.StateDone || r.Outcome != string(engine.StatusCompleted) {
			t.Errorf("request %s: %s %s\nworker1:\n%s\nworker2:\n%s", r.RunRequestID, r.State, r.Outcome, victim.logText(), heir.logText())
		}
		q := queuedOf(t, h, r.RunID)
		if q.DataInterval == nil || q.Target != "prod" || q.Vars["region"] != "eu" {
			t.Fatalf("run %s RunQueued %+v", r.RunID, q)
		}
		start, err := time.Parse(engine.TimeFormat, q.DataInterval.Start)
		if err != nil {
			t.Fatal(err)
		}
		day := start.In(mustZone(t, "Europe/Berlin")).Format("2006-01-02")
		intervals[r.RunID] = day
		if r.RunID == crashRun {
			crashDay = day
			if r.Attempts < 2 {
				t.Errorf("the killed run %s was not taken over (attempts %d)", crashRun, r.Attempts)
			}
		}
	}
	if crashDay == "" {
		t.Fatalf("the killed run %s is not among the requests", crashRun)
	}

	// Seven distinct partitions, each loaded once, each the day of its
	// run's interval; the resumed run's day among them, once.
	wh, err := sql.Open("sqlite", prodWH)
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	days := map[string]bool{}
	for _, d := range intervals {
		days[d] = true
	}
	rows, err := wh.Query("select day, count(*) from loads group by day")
	if err != nil {
		t.Fatal(err)
	}
	loads := map[string]int{}
	for rows.Next() {
		var d string
		var n int
		if err := rows.Scan(&d, &n); err != nil {
			t.Fatal(err)
		}
		loads[d] = n
	}
	rows.Close()
	var partitions, regions int
	if err := wh.QueryRow("select count(distinct day), count(*) from daily where region = 'eu'").Scan(&partitions, &regions); err != nil {
		t.Fatal(err)
	}
	if len(days) != 7 || len(loads) != 7 || partitions != 7 || regions != 7 {
		t.Fatalf("intervals %v; loads %v; daily: %d partitions, %d rows of region eu", intervals, loads, partitions, regions)
	}
	for d := range days {
		if loads[d] != 1 {
			t.Errorf("day %s loaded %d times, want once", d, loads[d])
		}
	}
	if tableCount(t, devWH, "loads") != -1 {
		t.Errorf("dev's warehouse has loads")
	}

	// retry from a fourth directory, on prod: nothing failed.
	r = runIn(t, bin, env, filepath.Join(root, "d/retry"), "--config", "../../project/dvtrun.yaml", "--target", "prod", "retry", crashRun)
	if r.code != 0 || !strings.Contains(r.stdout, "Nothing to retry") {
		t.Fatalf("retry: %+v", r)
	}
	t.Logf("7 backfilled runs on prod, 7 partitions loaded once each; run %s (day %s) resumed by a worker in another tree after SIGKILL", crashRun, crashDay)
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
