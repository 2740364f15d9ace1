package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	dvtemporal "github.com/dvtrun/dvtrun/engine/temporal"
)

// abcPlan: independent sql steps a and b, and c after both.
const abcPlan = `planId: abc
planVersion: "1"
schemaVersion: "1"
steps:
  - {id: sql.a, kind: sql, sql: "CREATE TABLE IF NOT EXISTS a_done (x INTEGER)"}
  - {id: sql.b, kind: sql, sql: "CREATE TABLE IF NOT EXISTS b_done (x INTEGER)"}
  - {id: sql.c, kind: sql, sql: "CREATE TABLE IF NOT EXISTS c_done (x INTEGER)", dependsOn: [sql.a, sql.b]}
`

// TestResumeAndRetryOnTemporal: `dvtrun resume` and `dvtrun retry` of a
// run that started on Temporal run on Temporal — with no engine in the
// config or on the command line, where a run would be local. A run whose
// workflow was terminated mid-step is resumed by a new execution of its
// workflow (same id, the run id), on the task queue of the resuming
// process's worker, which carries the run on from its log to COMPLETED;
// a FAILED run's retry is a new run whose RunStarted says engineType
// temporal, executed by a workflow of its own.
func TestResumeAndRetryOnTemporal(t *testing.T) {
	bin := buildDvtrun(t)
	ts := newServer(t)
	e := newEnv(t, ts, nil)
	planFile := filepath.Join(e.dir, "abc.yaml")
	if err := os.WriteFile(planFile, []byte(abcPlan), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := plan.LoadBundle(osFiles{}, planFile)
	if err != nil {
		t.Fatal(err)
	}
	data, err := plan.EncodeBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.PutPlanBundle(e.ctx, b.Ref.SHA256, data); err != nil {
		t.Fatal(err)
	}
	// The first runs run on this process's worker, queue "first"; the
	// CLI's worker polls "cli" only.
	g := newGate(e.wh, "sql.b")
	e.acts.Warehouse = g
	e.worker("first", b.Plan)
	cfgFile := filepath.Join(e.dir, "dvt.yaml")
	cfgText := fmt.Sprintf("temporal: {address: %q, namespace: %q, taskQueue: cli, heartbeatTimeout: 1s}\n", ts.GetFrontendHostPort(), ts.GetDefaultNamespace())
	if err := os.WriteFile(cfgFile, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	dvt := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--store", "sqlite:" + filepath.Join(e.dir, "state.db"), "--warehouse", "sqlite:" + filepath.Join(e.dir, "wh.db"),
			"--config", cfgFile, "--tenant", cfg.TenantID, "--project", cfg.ProjectID, "--environment", cfg.EnvironmentID}, args...)...)
		cmd.Dir = e.dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dvtrun %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	engineType := func(runID string) string {
		t.Helper()
		for _, ev := range e.events(runID) {
			if ev.EventType == engine.RunStarted {
				for _, et := range []string{"temporal", "local"} {
					if strings.Contains(string(ev.Payload), `"engineType":"`+et+`"`) {
						return et
					}
				}
			}
		}
		return ""
	}

	t.Run("resume a terminated workflow", func(t *testing.T) {
		runID, err := e.eng.StartRun(e.ctx, engine.StartRequest{Plan: b.Plan, Ref: b.Ref})
		if err != nil {
			t.Fatal(err)
		}
		r := e.run("first", dvtemporal.Input{RunID: runID, Threads: 2, HeartbeatTimeout: time.Second})
		recv(t, g.started, "sql.b to start")
		if err := e.c.TerminateWorkflow(e.ctx, runID, "", "killed by the test"); err != nil {
			t.Fatal(err)
		}
		if err := e.wait(r, time.Minute); err == nil {
			t.Fatal("the terminated workflow ended without an error")
		}
		if s := engine.Project(runID, e.events(runID)); s.Status != engine.StatusRunning || stepStatus(s, "sql.b") != engine.StepStatusRunning {
			t.Fatalf("after the kill: run %s, sql.b %s; want RUNNING both", s.Status, stepStatus(s, "sql.b"))
		}
		out := dvt("resume", runID)
		if !strings.Contains(out, "on Temporal") || !strings.Contains(out, "COMPLETED") {
			t.Fatalf("resume:\n%s", out)
		}
		desc, err := e.c.DescribeWorkflowExecution(e.ctx, runID, "")
		if err != nil {
			t.Fatal(err)
		}
		info := desc.GetWorkflowExecutionInfo()
		if info.GetExecution().GetRunId() == r.GetRunID() || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED || info.GetTaskQueue() != "cli" {
			t.Fatalf("workflow %s: execution %s (killed: %s), %s, task queue %s; want a new execution COMPLETED on the CLI's queue cli",
				runID, info.GetExecution().GetRunId(), r.GetRunID(), info.GetStatus(), info.GetTaskQueue())
		}
		meta, err := e.store.GetRun(e.ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("temporal://%s/%s/%s", ts.GetDefaultNamespace(), runID, info.GetExecution().GetRunId()); meta.ProviderRunRef != want {
			t.Errorf("providerRunRef %s, want the new execution's %s", meta.ProviderRunRef, want)
		}
		snap := e.verify(runID)
		if snap.Status != engine.StatusCompleted || engineType(runID) != "temporal" {
			t.Fatalf("run %s, engineType %q; want COMPLETED on temporal: %v", snap.Status, engineType(runID), types(e.events(runID)))
		}
		// sql.b ran again on the CLI's worker (the real warehouse), not on
		// the gated one that was killed.
		if n := g.count(g.calls, "sql.b"); n != 1 {
			t.Errorf("the killed worker's warehouse ran sql.b %d times, want once", n)
		}
		if out := dvt("resume", runID); !strings.Contains(out, "already COMPLETED") {
			t.Fatalf("a second resume:\n%s", out)
		}
	})

	t.Run("retry a failed run", func(t *testing.T) {
		g.mu.Lock()
		g.failFirst["sql.a"] = true
		g.calls["sql.a"] = 0
		g.mu.Unlock()
		g.release("sql.b")
		runID, err := e.eng.StartRun(e.ctx, engine.StartRequest{Plan: b.Plan, Ref: b.Ref})
		if err != nil {
			t.Fatal(err)
		}
		r := e.run("first", dvtemporal.Input{RunID: runID, Threads: 2, HeartbeatTimeout: time.Second})
		if err := e.wait(r, time.Minute); err != nil {
			t.Fatal(err)
		}
		if s := e.verify(runID); s.Status != engine.StatusFailed {
			t.Fatalf("the first run is %s, want FAILED", s.Status)
		}
		out := dvt("retry", runID)
		if !strings.Contains(out, "Retrying 2 step(s)") || !strings.Contains(out, "COMPLETED") {
			t.Fatalf("retry:\n%s", out)
		}
		var retryID string
		for line := range strings.Lines(out) {
			if _, after, ok := strings.Cut(line, " as run "); ok {
				retryID = strings.TrimSpace(after)
			}
		}
		if retryID == "" || retryID == runID {
			t.Fatalf("no new run in:\n%s", out)
		}
		if snap := e.verify(retryID); snap.Status != engine.StatusCompleted || engineType(retryID) != "temporal" {
			t.Fatalf("the retry run %s, engineType %q; want COMPLETED on temporal", snap.Status, engineType(retryID))
		}
		desc, err := e.c.DescribeWorkflowExecution(e.ctx, retryID, "")
		if err != nil {
			t.Fatalf("the retry run has no workflow: %v", err)
		}
		if info := desc.GetWorkflowExecutionInfo(); info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED || info.GetTaskQueue() != "cli" {
			t.Fatalf("the retry's workflow: %s on %s, want COMPLETED on cli", info.GetStatus(), info.GetTaskQueue())
		}
		// --engine still wins: the same retry, asked for locally.
		out = dvt("retry", "--engine", "local", runID)
		for line := range strings.Lines(out) {
			if _, after, ok := strings.Cut(line, " as run "); ok {
				retryID = strings.TrimSpace(after)
			}
		}
		if engineType(retryID) != "local" {
			t.Fatalf("retry --engine local ran on %q:\n%s", engineType(retryID), out)
		}
	})
}
