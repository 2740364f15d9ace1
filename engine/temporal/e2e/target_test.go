package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	dvtemporal "github.com/dvtrun/dvtrun/engine/temporal"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// lockedBuffer collects the output of several processes (exec copies each
// one's from its own goroutine).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tickPlan is one quick step: a schedule tick's run.
const tickPlan = `planId: tick
planVersion: "1"
schemaVersion: "1"
steps:
  - id: sql.tick
    kind: sql
    sql: CREATE TABLE IF NOT EXISTS ticks (n INTEGER)
`

// TestTargetOnTemporalSchedulesOncePerTick is `engine: temporal` on a
// config target: two `dvtrun scheduler --target tmp` fire one schedule
// into dvtrun's queue and one `dvtrun worker --target tmp` turns each
// claimed request — and an `enqueue --target tmp` — into a workflow start:
// one run, one workflow (id = run id) per tick, each COMPLETED, every
// runRequestId once, `verify --all` clean.
func TestTargetOnTemporalSchedulesOncePerTick(t *testing.T) {
	t.Parallel()
	bin := buildDvtrun(t)
	ts := newServer(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tick.yaml"), []byte(tickPlan), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "dvtrun.yaml")
	// The top-level block points nowhere: the target's own block must win.
	cfgText := fmt.Sprintf(`temporal: {address: "127.0.0.1:1", taskQueue: wrong}
target: tmp
targets:
  tmp:
    store: sqlite:state.db
    warehouse: sqlite:wh.db
    engine: temporal
    temporal: {address: %q, namespace: %q, taskQueue: targets}
schedules:
  - {name: ticker, cron: "@every 2s", plan: tick.yaml, target: tmp, overlap: allow_all}
`, ts.GetFrontendHostPort(), ts.GetDefaultNamespace())
	if err := os.WriteFile(cfgFile, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	dvt := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--config", cfgFile, "--target", "tmp"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("dvtrun %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	var logs lockedBuffer
	var procs []*exec.Cmd
	start := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, append([]string{"--config", cfgFile, "--target", "tmp"}, args...)...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
		return cmd
	}
	stop := func(cmd *exec.Cmd) {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
		if t.Failed() {
			t.Logf("daemon logs:\n%s", logs.String())
		}
	})
	worker := start("worker", "--poll", "100ms", "--threads", "2")
	dvt("enqueue", "tick.yaml")
	s1 := start("scheduler", "--poll", "100ms")
	s2 := start("scheduler", "--poll", "100ms")
	// Two ticks of @every 2s enqueued (the event), within a minute; the
	// schedulers ran for firing, which bounds how many ticks there were.
	from := time.Now()
	waitTicks := time.Now().Add(time.Minute)
	for {
		var reqs []queue.Request
		if err := json.Unmarshal([]byte(dvt("queue", "--all", "--json")), &reqs); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, q := range reqs {
			if q.Schedule == "ticker" {
				n++
			}
		}
		if n >= 2 {
			break
		}
		if time.Now().After(waitTicks) {
			t.Fatalf("%d ticks of @every 2s enqueued within a minute, want 2", n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop(s1)
	stop(s2)
	firing := time.Since(from)

	type run struct {
		RunID          string `json:"runId"`
		Status         string `json:"status"`
		RunRequestID   string `json:"runRequestId"`
		ProviderRunRef string `json:"providerRunRef"`
		Schedule       string `json:"schedule"`
	}
	// Every request ends (bounded): the worker has started and waited for
	// each one's workflow.
	var requests []queue.Request
	deadline := time.Now().Add(time.Minute)
	for {
		requests = nil
		if err := json.Unmarshal([]byte(dvt("queue", "--all", "--json")), &requests); err != nil {
			t.Fatal(err)
		}
		done := len(requests) > 0
		for _, q := range requests {
			done = done && q.State == queue.StateDone
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests not all DONE within a minute: %+v", requests)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var runs []run
	if err := json.Unmarshal([]byte(dvt("runs", "--json")), &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != len(requests) {
		t.Fatalf("%d runs of %d requests, want one each", len(runs), len(requests))
	}
	for _, q := range requests {
		if q.Outcome != string(engine.StatusCompleted) {
			t.Errorf("request %s: outcome %s", q.RunRequestID, q.Outcome)
		}
	}
	stop(worker)

	scheduled, seen := 0, map[string]bool{}
	var ticks []time.Time
	for _, r := range runs {
		if r.Schedule == "ticker" {
			scheduled++
			tick, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(r.RunRequestID, "schedule:ticker:"))
			if err != nil {
				t.Errorf("run %s: runRequestId %q does not name its tick: %v", r.RunID, r.RunRequestID, err)
			}
			ticks = append(ticks, tick)
		}
		if r.Status != string(engine.StatusCompleted) {
			t.Errorf("run %s is %s", r.RunID, r.Status)
		}
		if r.RunRequestID == "" || seen[r.RunRequestID] {
			t.Errorf("run %s: runRequestId %q empty or seen twice", r.RunID, r.RunRequestID)
		}
		seen[r.RunRequestID] = true
		if !strings.HasPrefix(r.ProviderRunRef, "temporal://"+ts.GetDefaultNamespace()+"/"+r.RunID+"/") {
			t.Errorf("run %s: providerRunRef %q, want temporal://%s/%s/…", r.RunID, r.ProviderRunRef, ts.GetDefaultNamespace(), r.RunID)
		}
		d, err := ts.GetDefaultClient().DescribeWorkflowExecution(context.Background(), r.RunID, "")
		if err != nil {
			t.Fatalf("run %s has no workflow: %v", r.RunID, err)
		}
		if st := d.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			t.Errorf("run %s: workflow %s", r.RunID, st)
		}
		// RunStarted says who triggered the run, as its RunQueued does.
		want := []string{`"engineType":"temporal"`, `"triggerSource":"queue"`}
		if r.Schedule == "ticker" {
			want = []string{`"engineType":"temporal"`, `"triggerSource":"schedule"`, `"triggeredBy":"schedule:ticker"`}
		}
		started := ""
		for line := range strings.Lines(dvt("events", "--full", r.RunID)) {
			if strings.Contains(line, "RunStarted") {
				started = line
			}
		}
		for _, w := range want {
			if !strings.Contains(started, w) {
				t.Errorf("run %s: RunStarted without %s: %q", r.RunID, w, started)
			}
		}
	}
	// Two schedulers, one run per tick: the ticks are consecutive, each
	// once, and no more than @every 2s gives while they ran.
	slices.SortFunc(ticks, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != 2*time.Second {
			t.Errorf("ticks %s and %s are %s apart, want 2s: one run per tick, none left out", ticks[i-1], ticks[i], d)
		}
	}
	if most := int(firing/(2*time.Second)) + 2; scheduled < 2 || scheduled > most || len(runs) != scheduled+1 {
		t.Fatalf("%d scheduled runs of %d runs, want 2..%d (one per tick in %s) and the enqueued one: %+v", scheduled, len(runs), most, firing.Round(time.Millisecond), runs)
	}
	if out := dvt("verify", "--all"); !strings.Contains(out, "SQL projection == Go reducer") {
		t.Fatalf("verify --all:\n%s", out)
	}
}

// TestJaffleShopOnTemporalTarget is the must-show through the CLI:
// dbt's jaffle_shop, imported from the reference manifest as the dbt
// import tests do, runs with `dvtrun run --target tmp` (engine: temporal)
// against the real server and with `--target dev` on the local runner,
// one store, a warehouse each: COMPLETED both, the same tables, RunStarted
// with engineType temporal, `verify --all` clean.
func TestJaffleShopOnTemporalTarget(t *testing.T) {
	t.Parallel()
	ref, err := filepath.Abs("../../../../shared/reference")
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(ref, "dbt_manifests", "openlineage_postgres_v12", "manifest.json")
	if _, err := os.Stat(manifest); err != nil {
		// CI lays ../shared beside the clone: there its absence is a failure.
		if os.Getenv("CI") == "true" {
			t.Fatalf("reference material not available at %s: %v", ref, err)
		}
		t.Skipf("reference material not available at %s: %v", ref, err)
	}
	bin := buildDvtrun(t)
	ts := newServer(t)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "dvtrun.yaml")
	cfgText := fmt.Sprintf(`target: dev
targets:
  dev: {store: sqlite:state.db, warehouse: sqlite:dev.db}
  tmp:
    store: sqlite:state.db
    warehouse: sqlite:tmp.db
    engine: temporal
    temporal: {address: %q, namespace: %q, taskQueue: jaffle}
`, ts.GetFrontendHostPort(), ts.GetDefaultNamespace())
	if err := os.WriteFile(cfgFile, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	dvt := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--config", cfgFile}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dvtrun %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	dvt("plan", "import-dbt", manifest, "--project-dir", filepath.Join(ref, "jaffle_shop"), "-o", filepath.Join(dir, "jaffle_shop.yaml"))
	for _, target := range []string{"dev", "tmp"} {
		if out := dvt("run", "--target", target, "jaffle_shop.yaml"); !strings.Contains(out, "COMPLETED") || !strings.Contains(out, "PASS=28") {
			t.Fatalf("run --target %s:\n%s", target, out)
		}
	}
	if out := dvt("events", "--full", "--target", "tmp", "last"); !strings.Contains(out, `"engineType":"temporal"`) || !strings.Contains(out, "temporal://"+ts.GetDefaultNamespace()+"/") {
		t.Fatalf("the tmp run's RunStarted:\n%s", out)
	}
	if out := dvt("verify", "--all"); !strings.Contains(out, "SQL projection == Go reducer") {
		t.Fatalf("verify --all:\n%s", out)
	}
	ctx := context.Background()
	warehouses := map[string]map[string][]string{}
	for _, target := range []string{"dev", "tmp"} {
		wh, err := sqlite.OpenWarehouse(ctx, filepath.Join(dir, target+".db"))
		if err != nil {
			t.Fatal(err)
		}
		warehouses[target] = tables(t, wh.DB())
		wh.Close()
	}
	got, want := warehouses["tmp"], warehouses["dev"]
	if len(want["customers"]) != 100 || len(want["orders"]) != 99 {
		t.Fatalf("the local run built customers %d rows, orders %d; want 100 and 99", len(want["customers"]), len(want["orders"]))
	}
	for name, rows := range want {
		if !slices.Equal(got[name], rows) {
			t.Errorf("table %s: Temporal has %d rows, local %d (or they differ)", name, len(got[name]), len(rows))
		}
	}
	if len(got) != len(want) {
		t.Errorf("Temporal built %d relations, local %d", len(got), len(want))
	}
}

// TestStartRunTwiceIsOneWorkflow is what makes a request claimed again (its
// worker died while waiting) or started by two processes one run: two
// concurrent starts of a run answer the same workflow execution, and a
// start after it ended answers that execution, never a second one.
func TestStartRunTwiceIsOneWorkflow(t *testing.T) {
	t.Parallel()
	ts := newServer(t)
	p := loadShop(t)
	e := newEnv(t, ts, nil)
	e.worker("twice", p)
	runID := e.start(p)
	in := dvtemporal.Input{RunID: runID, Threads: 4}
	var runs [2]client.WorkflowRun
	var errs [2]error
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() { runs[i], errs[i] = dvtemporal.StartRun(e.ctx, e.c, "twice", in) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	if runs[0].GetRunID() != runs[1].GetRunID() {
		t.Fatalf("two starts of run %s: executions %s and %s", runID, runs[0].GetRunID(), runs[1].GetRunID())
	}
	if err := e.wait(runs[0], 2*time.Minute); err != nil {
		t.Fatalf("workflow: %v", err)
	}
	again, err := dvtemporal.StartRun(e.ctx, e.c, "twice", in)
	if err != nil {
		t.Fatalf("a start after the end: %v", err)
	}
	if again.GetRunID() != runs[0].GetRunID() {
		t.Fatalf("a start after the end began execution %s, not the ended %s", again.GetRunID(), runs[0].GetRunID())
	}
	if err := e.wait(again, 10*time.Second); err != nil {
		t.Fatalf("the ended workflow: %v", err)
	}
	if snap := e.verify(runID); snap.Status != engine.StatusCompleted {
		t.Fatalf("run %s is %s", runID, snap.Status)
	}
	started := 0
	for _, ev := range e.events(runID) {
		if ev.EventType == engine.RunStarted {
			started++
		}
	}
	if started != 1 {
		t.Fatalf("%d RunStarted events, want 1", started)
	}
}
