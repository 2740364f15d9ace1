package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/queue"
	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// daemonProc is a dvtrun daemon started by a test.
type daemonProc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan error
}

func startDaemon(t *testing.T, bin string, env []string, dir, name string, args ...string) *daemonProc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &daemonProc{name: name, cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); f.Close() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// stop sends SIGTERM and returns the exit code.
func (p *daemonProc) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	select {
	case err := <-p.done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		return 0
	case <-time.After(90 * time.Second):
		t.Fatalf("%s did not stop within 90s of SIGTERM", p.name)
		return -1
	}
}

func (p *daemonProc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func openTestStore(t *testing.T, h *harness) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), h.statePath(), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestProcessSchedulersAndWorkers: two scheduler and two worker processes
// on one SQLite store, a schedule firing every second for 20+ ticks: one
// request and one run per tick, every run COMPLETED, every process exits 0
// on SIGTERM.
func TestProcessSchedulersAndWorkers(t *testing.T) {
	bin := buildBinary(t)
	h := newHarness(t)
	plan, _ := filepath.Abs(fixture("ok", "plan.yaml"))
	cfg := h.writeConfig(`schedules:
  - name: every-second
    cron: "@every 1s"
    plan: ` + plan + `
    overlap: buffer_all
    catchupWindow: 1m
`)
	env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"], "DVT_CONFIG="+cfg)
	// The store exists before the four processes open it.
	st := openTestStore(t, h)
	var scheds, workers []*daemonProc
	for i := range 2 {
		scheds = append(scheds, startDaemon(t, bin, env, h.dir, "scheduler"+string(rune('a'+i)), "scheduler", "--poll", "200ms"))
		workers = append(workers, startDaemon(t, bin, env, h.dir, "worker"+string(rune('a'+i)), "worker", "--poll", "200ms", "--lease-ttl", "5s", "--slots", "2"))
	}
	const ticks = 22
	waitUntil(t, "22 ticks", 120*time.Second, func() bool {
		c, ok, err := st.GetCursor(context.Background(), "every-second")
		return err == nil && ok && c.Fired >= ticks
	})
	for _, p := range scheds {
		if code := p.stop(t); code != 0 {
			t.Errorf("%s exited %d on SIGTERM\n%s", p.name, code, p.logText())
		}
	}
	waitUntil(t, "every request to finish", 120*time.Second, func() bool {
		list, err := st.ListRequests(context.Background(), false)
		return err == nil && len(list) == 0
	})
	for _, p := range workers {
		if code := p.stop(t); code != 0 {
			t.Errorf("%s exited %d on SIGTERM\n%s", p.name, code, p.logText())
		}
	}
	cur, _, _ := st.GetCursor(context.Background(), "every-second")
	list, err := st.ListRequests(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(list)) != cur.Fired || cur.Missed != 0 || cur.Skipped != 0 {
		t.Fatalf("%d requests, cursor %+v: want one request per fired tick, none missed", len(list), cur)
	}
	// One request per tick: consecutive seconds, each once.
	var ticksSeen []string
	runs := map[string]bool{}
	byWorker := map[string]int{}
	for _, r := range list {
		if r.State != queue.StateDone || r.Outcome != string(engine.StatusCompleted) || r.RunID == "" {
			t.Errorf("request %s: %s %s run %q", r.RunRequestID, r.State, r.Outcome, r.RunID)
		}
		ticksSeen = append(ticksSeen, strings.TrimPrefix(r.RunRequestID, "schedule:every-second:"))
		runs[r.RunID] = true
		byWorker[r.Owner]++
	}
	sort.Strings(ticksSeen)
	for i := 1; i < len(ticksSeen); i++ {
		a, _ := time.Parse(time.RFC3339Nano, ticksSeen[i-1])
		b, _ := time.Parse(time.RFC3339Nano, ticksSeen[i])
		if b.Sub(a) != time.Second {
			t.Errorf("ticks %s and %s: want consecutive seconds, each once", ticksSeen[i-1], ticksSeen[i])
		}
	}
	all, err := st.ListRuns(context.Background(), storeFilterAll())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(list) || len(runs) != len(list) {
		t.Fatalf("%d runs for %d requests (%d distinct run ids): want one run per tick", len(all), len(list), len(runs))
	}
	for _, m := range all {
		if s := h.checkLog(m.RunID); s.Status != engine.StatusCompleted {
			t.Errorf("run %s is %s", m.RunID, s.Status)
		}
	}
	t.Logf("%d ticks, one run each; runs per worker %v", len(list), byWorker)
}

func storeFilterAll() store.RunFilter { return store.RunFilter{Limit: 100000} }
