package main

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// TestStoppedRunnerDoesNotFreezeResume (issue 16, found 2): a runner
// stopped (SIGSTOP) inside a step keeps the SQLite warehouse's write
// transaction open. Past its lease, `resume` waits for that lock at most
// --lock-wait, printing what it waits for, then exits 4 with one sentence,
// the run resumable; continued, the old runner exits 3 (LEASE_LOST); a
// resume then completes it, and every effect happened once.
func TestStoppedRunnerDoesNotFreezeResume(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	plan, err := filepath.Abs(fixture("stopped", "plan.yaml")) // the processes run elsewhere
	if err != nil {
		t.Fatal(err)
	}
	const lockWait = 5 * time.Second
	for trial := range trials(5) {
		// The trials are independent (a store and a warehouse each): they
		// run side by side.
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"], "DVT_LOCK_WAIT="+lockWait.String())
			a := startProc(t, bin, env, "run", "--threads", "1", "--lease-ttl", "2s", plan)
			a.waitLine(t, "START sql operation s1 ")
			runID := h.onlyRun()
			time.Sleep(300 * time.Millisecond) // inside s1's transaction: it counts for seconds
			if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			if !writeLocked(t, h.warehousePath()) {
				a.cmd.Process.Signal(syscall.SIGCONT)
				t.Fatalf("trial %d: the stopped runner does not hold the warehouse's write lock: s1 ended too soon\n%s", trial, a.output())
			}
			time.Sleep(2500 * time.Millisecond) // past its lease

			start := time.Now()
			b := startProc(t, bin, env, "resume", "--lease-ttl", "2s", runID, plan)
			code := b.wait(t)
			took := time.Since(start)
			b.mu.Lock()
			stderr := b.stderr.String()
			b.mu.Unlock()
			if code != exitUnavailable {
				t.Fatalf("trial %d: resume while the stopped runner holds the warehouse: exit %d, want %d\n%s", trial, code, exitUnavailable, b.output())
			}
			t.Logf("trial %d: resume exited %d after %s (--lock-wait %s)", trial, code, took.Round(10*time.Millisecond), lockWait)
			if took > lockWait+5*time.Second {
				t.Errorf("trial %d: resume took %s, want its --lock-wait %s and little more", trial, took, lockWait)
			}
			errLines := 0
			for _, l := range strings.Split(stderr, "\n") {
				if strings.Contains(l, "dvtrun: STORE_UNAVAILABLE") {
					errLines++
					for _, want := range []string{"warehouse " + h.warehousePath(), "run " + runID, "was not released within 5s", "resumable"} {
						if !strings.Contains(l, want) {
							t.Errorf("trial %d: the error %q does not say %q", trial, l, want)
						}
					}
				}
			}
			if errLines != 1 {
				t.Errorf("trial %d: %d STORE_UNAVAILABLE lines, want one\n%s", trial, errLines, stderr)
			}
			// The progress line names the warehouse, the run, its previous
			// runner (from the store's lease) and since when.
			if !strings.Contains(stderr, "waiting for the lock on warehouse "+h.warehousePath()+" (run "+runID+") held by dvtrun@") || !strings.Contains(stderr, " since ") {
				t.Errorf("trial %d: no progress line naming the warehouse, the run, the holder and since when:\n%s", trial, stderr)
			}
			if s := h.statusOf(runID); s.Status != engine.StatusRunning {
				t.Fatalf("trial %d: after the wait ran out the run is %s, want RUNNING (resumable)", trial, s.Status)
			}

			if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			wantLeaseLost(t, trial, a.wait(t), a)
			if trial == 0 {
				t.Logf("resume's stderr:\n%s", stderr)
			}
			h.resumeUntilDone(t, bin, env, runID, plan)
			h.checkExactlyOnce(t, runID)
		})
	}
}

// writeLocked reports whether another connection holds the SQLite
// database's write lock (BEGIN IMMEDIATE fails busy at once).
func writeLocked(t *testing.T, path string) bool {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=rw&_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		if strings.Contains(err.Error(), "SQLITE_BUSY") || strings.Contains(err.Error(), "locked") {
			return true
		}
		t.Fatalf("BEGIN IMMEDIATE on %s: %v", path, err)
	}
	conn.ExecContext(t.Context(), "ROLLBACK") //nolint:errcheck
	return false
}
