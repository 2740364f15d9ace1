package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// The exactly-once process tests (issue 8): real dvtrun processes on a
// real SQLite warehouse, killed, stalled and taken over at random points;
// every sql step of testdata/effects inserts one row naming itself, so a
// doubled effect shows as a second row.

// proc is a dvtrun process whose stdout is read line by line.
type proc struct {
	cmd    *exec.Cmd
	lines  chan string // closed at EOF
	stderr strings.Builder
	mu     sync.Mutex
	out    strings.Builder
	done   chan struct{}
	code   int
}

func startProc(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), lines: make(chan string, 1024), done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Dir = t.TempDir() // run artifacts (.dvt/runs) land there, not in the package
	p.cmd.Stderr = &lockedWriter{mu: &p.mu, b: &p.stderr}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			p.lines <- sc.Text()
		}
		close(p.lines)
		err := p.cmd.Wait()
		p.code = 0
		if ee, ok := err.(*exec.ExitError); ok {
			p.code = ee.ExitCode()
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// waitLine waits for a stdout line containing any of subs and returns it.
func (p *proc) waitLine(t *testing.T, subs ...string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("the process ended before printing %q:\n%s", subs, p.output())
			}
			for _, s := range subs {
				if strings.Contains(l, s) {
					return l
				}
			}
		case <-timeout:
			t.Fatalf("no line with %q within 60s:\n%s", subs, p.output())
		}
	}
}

// wait waits for the process to end (draining stdout) and returns its
// exit code.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	go func() {
		for range p.lines {
		}
	}()
	select {
	case <-p.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("the process did not end within 90s:\n%s", p.output())
	}
	return p.code
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String() + "\nstderr: " + p.stderr.String()
}

// storeLock holds BEGIN EXCLUSIVE on an SQLite database from another
// connection: every writer of the file waits (or times out) meanwhile.
type storeLock struct {
	db   *sql.DB
	conn *sql.Conn
}

func lockDB(t *testing.T, path string) *storeLock {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE"); err != nil {
		t.Fatalf("BEGIN EXCLUSIVE on %s: %v", path, err)
	}
	return &storeLock{db: db, conn: conn}
}

func (l *storeLock) release(t *testing.T) {
	t.Helper()
	if _, err := l.conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	l.conn.Close()
	l.db.Close()
}

// rowsPerStep runs query, which returns (step, count) rows, on the
// harness's warehouse (SQLite read-only, Snowflake or Postgres); a table not created
// yet reads as none.
func (h *harness) rowsPerStep(query string) map[string]int {
	h.t.Helper()
	driver, dsn := "sqlite", "file:"+h.warehousePath()+"?mode=ro&_pragma=busy_timeout(30000)"
	if sf, ok := strings.CutPrefix(h.env["DVT_WAREHOUSE"], "snowflake://"); ok {
		driver, dsn = "snowflake", sf
	}
	if wh := h.env["DVT_WAREHOUSE"]; strings.HasPrefix(wh, "postgres://") {
		driver, dsn = "pgx", wh
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		h.t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(query)
	if err != nil {
		if strings.Contains(err.Error(), "no such table") || strings.Contains(err.Error(), "does not exist") {
			return map[string]int{}
		}
		h.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			h.t.Fatal(err)
		}
		out[s] = n
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// effects counts testdata/effects' side-effect rows per step.
func (h *harness) effects() map[string]int {
	return h.rowsPerStep("SELECT step, count(*) FROM effects GROUP BY step")
}

var effectSteps = []string{"s1", "s2", "s3", "s4", "s5", "s6"}

// resumeUntilDone resumes the run until no lease or lock is in the way
// (exit 3 LEASE_HELD while the dead or stalled runner's lease lasts, exit 4
// while it holds the store busy) and requires it to complete. flags go
// before the run id.
func (h *harness) resumeUntilDone(t *testing.T, bin string, env []string, runID, plan string, flags ...string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		args := append(append([]string{"resume", "--lease-ttl", "2s"}, flags...), runID, plan)
		p := startProc(t, bin, env, args...)
		code := p.wait(t)
		if code == 0 {
			return
		}
		if (code != exitLease && code != exitUnavailable) || time.Now().After(deadline) {
			t.Fatalf("resume: exit %d\n%s", code, p.output())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// checkExactlyOnce: every effect happened once, the log is valid, the run
// completed, verify --all agrees.
func (h *harness) checkExactlyOnce(t *testing.T, runID string) engine.Snapshot {
	t.Helper()
	got := h.effects()
	for _, s := range effectSteps {
		if got[s] != 1 {
			t.Errorf("step %s took effect %d times, want once (effects %v)", s, got[s], got)
		}
	}
	snap := h.checkLog(runID)
	if snap.Status != engine.StatusCompleted {
		t.Errorf("run %s is %s, want COMPLETED", runID, snap.Status)
	}
	if r := h.run("verify", "--all"); r.code != 0 {
		t.Errorf("verify --all: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return snap
}

// ledgerCompletions counts StepCompleted events whose result came from the
// warehouse's ledger (the step had committed and was not run again).
func (h *harness) ledgerCompletions(runID string) int {
	n := 0
	for _, e := range h.events(runID) {
		if fromLedger(e) {
			n++
		}
	}
	return n
}

// fromLedger: e is a StepCompleted whose result came from the ledger.
func fromLedger(e engine.RunEventRecord) bool {
	var pl struct {
		Ledger json.RawMessage `json:"ledger"`
	}
	return e.EventType == engine.StepCompleted && json.Unmarshal(e.Payload, &pl) == nil && len(pl.Ledger) > 0
}

// wantLeaseLost: the old runner p stopped with LEASE_LOST (exit 3).
func wantLeaseLost(t *testing.T, trial, code int, p *proc) {
	t.Helper()
	if code != exitLease || !strings.Contains(p.output(), "LEASE_LOST") {
		t.Errorf("trial %d: the old runner exited %d, want %d with LEASE_LOST\n%s", trial, code, exitLease, p.output())
	}
}

// killedBetweenCommitAndAppend (found 1): the runner is killed after a sql
// step's transaction committed in the warehouse and before its
// StepCompleted is stored (the SQLite state store is held locked, so the
// append waits); resume must not run the step again. harnessFor picks the
// warehouse (SQLite, Postgres). The trials are independent: they run side
// by side, each with its own random source from seed.
func killedBetweenCommitAndAppend(t *testing.T, bin, plan string, seed uint64, harnessFor func(*testing.T) *harness) {
	for trial := range trials(10) {
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			t.Parallel()
			killBetweenCommitAndAppend(t, bin, plan, rand.New(rand.NewPCG(seed, uint64(trial))), harnessFor(t))
		})
	}
}

// killBetweenCommitAndAppend is one trial of killedBetweenCommitAndAppend.
func killBetweenCommitAndAppend(t *testing.T, bin, plan string, rng *rand.Rand, h *harness) {
	env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"])
	step := effectSteps[rng.IntN(3)] // one of the first wave
	// While the store is locked the runner cannot renew its lease: the
	// lease (8s) must outlast the step's commit, or the runner fences
	// itself off and cancels the step first (a 2s lease did, under load).
	a := startProc(t, bin, env, "run", "--threads", "2", "--lease-ttl", "8s", plan)
	a.waitLine(t, "START sql operation "+step+" ")
	// The START line can come before the writer has stored RunStarted
	// (appends are written behind): lock the store only once it has.
	waitUntil(t, "the run's RunStarted in the store", func() bool {
		ids, err := h.listRuns()
		return err == nil && len(ids) == 1 && h.statusOf(ids[0]).Status == engine.StatusRunning
	})
	lock := lockDB(t, h.statePath())
	// The step commits in the warehouse; its StepCompleted waits
	// for the store. Kill somewhere inside that window.
	waitUntil(t, "step "+step+" committed in the warehouse", func() bool {
		return h.effects()[step] == 1
	})
	time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
	a.cmd.Process.Kill()
	a.wait(t)
	lock.release(t)
	runID := h.onlyRun()
	if s := h.statusOf(runID); s.Status != engine.StatusRunning {
		t.Fatalf("after SIGKILL the run is %s, want RUNNING", s.Status)
	}
	h.resumeUntilDone(t, bin, env, runID, plan)
	h.checkExactlyOnce(t, runID)
	if h.ledgerCompletions(runID) == 0 {
		t.Errorf("no step was completed from the ledger, though %s committed before the kill", step)
	}
}

// newSeed returns a seed for one test's fault points, logged so that a
// failure's trials can be replayed.
func newSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	return seed
}

// newRNG returns a random source for one test's fault points, its seed
// logged.
func newRNG(t *testing.T) *rand.Rand {
	return rand.New(rand.NewPCG(newSeed(t), 8))
}

func trials(n int) int {
	if testing.Short() {
		return 2
	}
	return n
}

func TestExactlyOnceProcesses(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	plan, err := filepath.Abs(fixture("effects", "plan.yaml")) // the processes run elsewhere
	if err != nil {
		t.Fatal(err)
	}
	newEnv := func(h *harness) []string {
		return append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"])
	}

	// Found 1: the runner is killed after a sql step's transaction
	// committed in the warehouse and before its StepCompleted is stored
	// (the state store is held locked, so the append waits); resume must
	// not run the step again.
	t.Run("KilledBetweenCommitAndAppend", func(t *testing.T) {
		t.Parallel()
		killedBetweenCommitAndAppend(t, bin, plan, newSeed(t), newHarness)
	})

	// midStep starts a runner with a 2s lease (1s is tight enough on a
	// loaded machine for a runner to fence itself off before its first
	// step) and returns a random moment (up to 300ms) after one of the
	// first n effect steps started.
	midStep := func(t *testing.T, rng *rand.Rand, n int) (*harness, []string, *proc, string) {
		h := newHarness(t)
		env := newEnv(h)
		a := startProc(t, bin, env, "run", "--threads", "2", "--lease-ttl", "2s", plan)
		a.waitLine(t, "START sql operation "+effectSteps[rng.IntN(n)]+" ")
		runID := h.onlyRun()
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		return h, env, a, runID
	}

	// Found 2: the store stalls longer than the lease while the runner is
	// alive; a resume started meanwhile takes over. Nothing may be doubled.
	// Steps do not wait for the store (group commit), so the old runner
	// may finish its steps during the stall; it then stops with LEASE_LOST
	// (its fenced appends meet the new owner), STORE_UNAVAILABLE (its
	// write-latency budget ran out first), or ends the run when its
	// appends land before the takeover — never with a step failed.
	t.Run("StalledStoreTakeover", func(t *testing.T) {
		t.Parallel()
		rng := newRNG(t)
		for trial := range trials(10) {
			h, env, a, runID := midStep(t, rng, 3)
			hold := 2500*time.Millisecond + time.Duration(rng.IntN(1500))*time.Millisecond // > the 2s lease
			lock := lockDB(t, h.statePath())
			locked := time.Now()
			time.Sleep(2100 * time.Millisecond) // the lease expires during the stall
			b := startProc(t, bin, env, "resume", "--lease-ttl", "2s", runID, plan)
			time.Sleep(time.Until(locked.Add(hold)))
			lock.release(t)
			codeA, codeB := a.wait(t), b.wait(t)
			switch codeA {
			case 0, exitLease, exitUnavailable:
			default:
				t.Errorf("trial %d: the old runner exited %d, want 0, %d or %d\n%s", trial, codeA, exitLease, exitUnavailable, a.output())
			}
			if codeB != 0 {
				// The old runner may have renewed once more before it
				// noticed its deadline; then resume meets its lease.
				if codeB != exitLease {
					t.Fatalf("trial %d: resume exited %d\n%s", trial, codeB, b.output())
				}
				h.resumeUntilDone(t, bin, env, runID, plan)
			}
			h.checkExactlyOnce(t, runID)
		}
	})

	// The old runner is alive but stopped (SIGSTOP) past its lease; another
	// runner takes over; the old one, continued, stops with LEASE_LOST.
	t.Run("StoppedRunnerTakeover", func(t *testing.T) {
		t.Parallel()
		rng := newRNG(t)
		for trial := range trials(3) {
			h, env, a, runID := midStep(t, rng, 3)
			if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2500 * time.Millisecond) // its lease expires
			// If a stopped while it held the store's write lock, b cannot
			// take over yet (exit 4, the store is busy) and retries below.
			b := startProc(t, bin, env, "resume", "--lease-ttl", "2s", runID, plan)
			time.Sleep(1500 * time.Millisecond)
			if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			codeA, codeB := a.wait(t), b.wait(t)
			wantLeaseLost(t, trial, codeA, a)
			switch codeB {
			case 0:
			case exitLease, exitUnavailable:
				h.resumeUntilDone(t, bin, env, runID, plan)
			default:
				t.Fatalf("trial %d: resume exited %d\n%s", trial, codeB, b.output())
			}
			h.checkExactlyOnce(t, runID)
		}
	})

	// The warehouse's or the state store's disk fills up mid-run: the run
	// stops resumable with exit 4 instead of failing; once space is back,
	// resume finishes it and nothing is doubled. The disk is a 4 MB tmpfs,
	// so the case needs the right to mount (root in a container); without
	// it, it is skipped.
	for _, db := range []string{"DVT_WAREHOUSE", "DVT_STORE"} {
		t.Run("DiskFull/"+db, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			disk := filepath.Join(h.dir, "disk")
			if err := os.Mkdir(disk, 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", disk).CombinedOutput(); err != nil {
				t.Skipf("cannot mount a small tmpfs to fill (%v: %s)", err, strings.TrimSpace(string(out)))
			}
			t.Cleanup(func() { exec.Command("umount", "-l", disk).Run() })
			h.env[db] = "sqlite:" + filepath.Join(disk, "db.sqlite")
			env := newEnv(h)
			// A full store cannot renew the lease, nor release it: the
			// runner must meet its write budget (1s, for the outcome it
			// cannot store: STORE_UNAVAILABLE) well before it fences
			// itself off for want of renewals (the lease's 8s: LEASE_LOST,
			// which a loaded machine saw with a 2s lease and the 3s
			// default budget). resume then waits the lease out.
			a := startProc(t, bin, env, "run", "--threads", "1", "--lease-ttl", "8s", "--write-budget", "1s", plan)
			a.waitLine(t, "START sql operation s1 ")
			runID := h.onlyRun()
			filler := filepath.Join(disk, "filler")
			f, err := os.Create(filler)
			if err != nil {
				t.Fatal(err)
			}
			block := make([]byte, 64<<10)
			for {
				if _, err := f.Write(block); err != nil {
					break // ENOSPC: the disk is full
				}
			}
			f.Close()
			if code := a.wait(t); code != exitUnavailable || !strings.Contains(a.output(), "STORE_UNAVAILABLE") {
				t.Fatalf("with the disk full: exit %d, want %d with STORE_UNAVAILABLE\n%s", code, exitUnavailable, a.output())
			}
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			if s := h.statusOf(runID); s.Status != engine.StatusRunning {
				t.Fatalf("after the outage the run is %s, want RUNNING (resumable)", s.Status)
			}
			h.resumeUntilDone(t, bin, env, runID, plan)
			h.checkExactlyOnce(t, runID)
		})
	}

	// Three runs at once on one SQLite warehouse (and one state store):
	// writers wait for each other; every run completes.
	t.Run("ThreeRunsOneWarehouse", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		env := newEnv(h)
		shop := filepath.Join(repoRoot(t), "plans", "shop", "plan.yaml")
		// Another writer holds the warehouse while the three start, so all
		// of their first steps queue on its lock together.
		release := holdWarehouse(t, h.warehousePath())
		var ps []*proc
		for range 3 {
			ps = append(ps, startProc(t, bin, env, "run", "--threads", "4", shop))
		}
		time.Sleep(2 * time.Second)
		release()
		for i, p := range ps {
			if code := p.wait(t); code != 0 {
				t.Errorf("run %d exited %d\n%s", i, code, p.output())
			}
		}
		runs, err := h.listRuns()
		if err != nil || len(runs) != 3 {
			t.Fatalf("%d runs %v", len(runs), err)
		}
		for _, id := range runs {
			if s := h.checkLog(id); s.Status != engine.StatusCompleted {
				t.Errorf("run %s is %s", id, s.Status)
			}
		}
	})
}

func (h *harness) warehousePath() string {
	return strings.TrimPrefix(h.env["DVT_WAREHOUSE"], "sqlite:")
}

// listRuns returns the ids of every run in the harness's store.
func (h *harness) listRuns() ([]string, error) {
	r := h.run("runs", "--json")
	if r.code != 0 {
		return nil, fmt.Errorf("runs: exit %d: %s", r.code, r.stderr)
	}
	var runs []struct {
		RunID string `json:"runId"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &runs); err != nil {
		return nil, err
	}
	var out []string
	for _, x := range runs {
		out = append(out, x.RunID)
	}
	return out, nil
}
