package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	dvtemporal "github.com/dvtrun/dvtrun/engine/temporal"
)

// buildDvtrun builds the dvtrun binary from this repository.
func buildDvtrun(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "dvtrun-e2e-bin-")
		if built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "dvtrun")
		cmd := exec.Command("go", "build", "-o", built.bin, "./cmd/dvtrun")
		cmd.Dir = "../../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build ./cmd/dvtrun: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// built is the CLI binary the tests share: built once, on first use, into
// a directory TestMain removes.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// TestMain removes the shared CLI binary when the tests end.
func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// crashPlan: a setup step, then a non-idempotent sql step that inserts one
// row per execution, slow enough (a recursive count) to be killed in.
const crashPlan = `planId: crash
planVersion: "1"
schemaVersion: "1"
steps:
  - id: sql.setup
    kind: sql
    sql: CREATE TABLE IF NOT EXISTS effects (n INTEGER)
  - id: sql.effect
    kind: sql
    dependsOn: [sql.setup]
    sql: INSERT INTO effects SELECT count(*) FROM (WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM r WHERE i < 1500000) SELECT i FROM r)
`

// TestWorkerCrashEffectsOnce runs two `dvtrun worker --engine temporal`
// processes and, in each trial, SIGKILLs the one running the
// non-idempotent step at a random point: Temporal retries the activity on
// the other worker, and the step ledger makes the effect happen once.
func TestWorkerCrashEffectsOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: ten crash trials take about a minute")
	}
	bin := buildDvtrun(t)
	ts := newServer(t)
	e := newEnv(t, ts, nil)
	dir := e.dir
	planFile := filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(planFile, []byte(crashPlan), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "dvt.yaml")
	cfgText := fmt.Sprintf("temporal: {address: %q, namespace: %q, taskQueue: crash, heartbeatTimeout: 1s}\n", ts.GetFrontendHostPort(), ts.GetDefaultNamespace())
	if err := os.WriteFile(cfgFile, []byte(cfgText), 0o644); err != nil {
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
	workers := map[int]*exec.Cmd{}
	var logs bytes.Buffer
	startWorker := func() {
		cmd := exec.Command(bin, "--store", "sqlite:"+filepath.Join(dir, "state.db"), "--warehouse", "sqlite:"+filepath.Join(dir, "wh.db"),
			"--config", cfgFile, "--tenant", cfg.TenantID, "--project", cfg.ProjectID, "--environment", cfg.EnvironmentID,
			"worker", "--engine", "temporal", "--threads", "2")
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		workers[cmd.Process.Pid] = cmd
	}
	t.Cleanup(func() {
		for _, w := range workers {
			_ = w.Process.Kill()
			_ = w.Wait()
		}
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	})
	startWorker()
	startWorker()
	const trials = 10
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 21))
	for trial := range trials {
		runID, err := e.eng.StartRun(e.ctx, engine.StartRequest{Plan: b.Plan, Ref: b.Ref})
		if err != nil {
			t.Fatal(err)
		}
		r := e.run("crash", dvtemporal.Input{RunID: runID, Threads: 2, HeartbeatTimeout: time.Second})
		pid := runningWorker(t, e, runID, "sql.effect")
		time.Sleep(time.Duration(rng.IntN(600)) * time.Millisecond)
		w := workers[pid]
		if w == nil {
			t.Fatalf("trial %d: the step runs on pid %d, not one of the workers", trial, pid)
		}
		_ = w.Process.Signal(syscall.SIGKILL)
		_ = w.Wait()
		delete(workers, pid)
		startWorker()
		if err := e.wait(r, 2*time.Minute); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if snap := e.verify(runID); snap.Status != engine.StatusCompleted {
			t.Fatalf("trial %d: run %s is %s", trial, runID, snap.Status)
		}
		var n int
		if err := e.wh.DB().QueryRowContext(e.ctx, `SELECT count(*) FROM effects`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != trial+1 {
			t.Fatalf("trial %d: %d effect rows after %d runs: the effect did not happen exactly once per run", trial, n, trial+1)
		}
		keys := map[string]bool{}
		for _, ev := range e.events(runID) {
			if keys[ev.IdempotencyKey] {
				t.Fatalf("trial %d: idempotency key %s twice in the log", trial, ev.IdempotencyKey)
			}
			keys[ev.IdempotencyKey] = true
		}
	}
}

// runningWorker waits (bounded) until the step's activity is running and
// returns the pid of the worker running it (its identity is pid@host@).
func runningWorker(t *testing.T, e *env, runID, step string) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		desc, err := e.c.DescribeWorkflowExecution(ctx, runID, "")
		cancel()
		if err == nil {
			for _, pa := range desc.GetPendingActivities() {
				if strings.HasPrefix(pa.GetActivityId(), step+"#") && pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED {
					pid, err := strconv.Atoi(strings.SplitN(pa.GetLastWorkerIdentity(), "@", 2)[0])
					if err == nil {
						return pid
					}
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after 1m waiting for step %s of run %s to run on a worker", step, runID)
	return 0
}

// TestCLIRunOnTemporal is README's example through the CLI: `dvtrun run
// --engine temporal` on the shop plan against the real server, then
// `verify --all` clean and RunStarted with engineType temporal.
func TestCLIRunOnTemporal(t *testing.T) {
	t.Parallel()
	bin := buildDvtrun(t)
	ts := newServer(t)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "dvt.yaml")
	cfgText := fmt.Sprintf("temporal: {address: %q, namespace: %q, taskQueue: cli}\n", ts.GetFrontendHostPort(), ts.GetDefaultNamespace())
	if err := os.WriteFile(cfgFile, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	dvt := func(args ...string) string {
		t.Helper()
		base := []string{"--store", "sqlite:" + filepath.Join(dir, "state.db"), "--warehouse", "sqlite:" + filepath.Join(dir, "wh.db"), "--config", cfgFile}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
		cmd.Dir = "../../.."
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dvtrun %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := dvt("run", "--engine", "temporal", "plans/shop/plan.yaml")
	if !strings.Contains(out, "COMPLETED") || !strings.Contains(out, "PASS=19") {
		t.Fatalf("run output:\n%s", out)
	}
	if out := dvt("verify", "--all"); !strings.Contains(out, "SQL projection == Go reducer") {
		t.Fatalf("verify --all:\n%s", out)
	}
	if out := dvt("events", "last", "--full"); !strings.Contains(out, `"engineType":"temporal"`) || !strings.Contains(out, "temporal://"+ts.GetDefaultNamespace()+"/") {
		t.Fatalf("RunStarted:\n%s", out)
	}
}
