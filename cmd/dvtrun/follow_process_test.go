package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/dvtrun/dvtrun/engine"
)

// lines collects a process's output lines and lets a test wait for one.
type lines struct {
	mu   sync.Mutex
	all  []string
	pos  int // waitFor looks past the previous match
	more chan struct{}
	done chan struct{}
}

func readLines(r io.Reader) *lines {
	l := &lines{more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.mu.Lock()
			l.all = append(l.all, sc.Text())
			l.mu.Unlock()
			select {
			case l.more <- struct{}{}:
			default:
			}
		}
	}()
	return l
}

func (l *lines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// waitFor waits until a line after the previous match matches re, and
// returns it: successive waits check the order of the output.
func (l *lines) waitFor(t *testing.T, what string, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.After(90 * time.Second)
	for {
		l.mu.Lock()
		for ; l.pos < len(l.all); l.pos++ {
			if re.MatchString(l.all[l.pos]) {
				line := l.all[l.pos]
				l.pos++
				l.mu.Unlock()
				return line
			}
		}
		ended := false
		select {
		case <-l.done:
			ended = len(l.more) == 0
		default:
		}
		l.mu.Unlock()
		if ended {
			t.Fatalf("output ended before %s; output:\n%s", what, l.text())
		}
		select {
		case <-l.more:
		case <-l.done:
			time.Sleep(10 * time.Millisecond)
		case <-deadline:
			t.Fatalf("no %s within 90s; output:\n%s", what, l.text())
		}
	}
}

func (l *lines) find(re *regexp.Regexp) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.all {
		if re.MatchString(s) {
			return s
		}
	}
	return ""
}

// holdWarehouse creates the warehouse database in WAL mode and takes its
// write lock: a step that writes waits (busy, retried as new engine
// attempts) until release is called. Reads — the runner's Ping — go on.
func holdWarehouse(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=rwc&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS gate (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO gate VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { tx.Rollback(); db.Close() }) }
	t.Cleanup(release)
	return release
}

// TestFollowProcess runs real dvtrun processes: `run` under a signals
// policy, `status --follow` beside it, and operators' signals from other
// processes. The follower shows the run RUNNING, the step in flight, an
// unauthorised CANCEL changing nothing, the PAUSE with DRAINING and the
// count of steps in flight, the drain, the RESUME and COMPLETED, and exits
// 0 as the run does. The run's console reports what was done from
// elsewhere.
func TestFollowProcess(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	h := newHarness(t)
	policy, err := filepath.Abs(fixture("policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"], "DVT_CONFIG="+policy)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := func(args ...string) (*exec.Cmd, *lines, *bytes.Buffer) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, readLines(out), &stderr
	}
	oneShot := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stdout.String(), stderr.String()
	}

	release := holdWarehouse(t, filepath.Join(h.dir, "warehouse.db"))
	runCmd, runOut, runErr := start("run", "--threads", "1", fixture("hold", "plan.yaml"))
	runID := regexp.MustCompile(`as run (\S+)$`).FindStringSubmatch(runOut.waitFor(t, "the run id", regexp.MustCompile(`as run \S+$`)))[1]
	runOut.waitFor(t, "the held step starting", regexp.MustCompile(`START sql table model held`))

	followCmd, follow, followErr := start("status", runID, "--follow", "--interval", "50ms")
	follow.waitFor(t, "RUNNING", regexp.MustCompile(`run\s+RUNNING$`))
	follow.waitFor(t, "the step in flight", regexp.MustCompile(`step\s+model\.held\s+RUNNING \(attempt 1\.\d+\)`))

	// mallory may not cancel: the runner records the rejection, nothing else.
	code, stdout, stderr := oneShot("cancel", runID, "--actor", "mallory", "--reason", "no\x1b[2Jreason")
	if code != exitFailed || !strings.Contains(stderr, "SIGNAL_REJECTED") || !strings.Contains(stdout, "rejected by the runner") {
		t.Fatalf("unauthorised cancel: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "does not allow it") {
		t.Errorf("the sender did not say that its policy refuses the signal:\n%s", stdout)
	}
	runOut.waitFor(t, "the rejection on the run's console", regexp.MustCompile(`^Signal CANCEL by mallory rejected: actor "mallory" may not send CANCEL`))
	if s := h.statusOf(runID); s.Status != engine.StatusRunning {
		t.Fatalf("after the rejected CANCEL the run is %s", s.Status)
	}

	code, stdout, stderr = oneShot("signal", runID, "pause", "--actor", "alice", "--reason", "deploy window")
	if code != 0 || !strings.Contains(stdout, "PAUSE accepted by the runner") {
		t.Fatalf("pause: exit %d\n%s\n%s", code, stdout, stderr)
	}
	follow.waitFor(t, "PAUSED with DRAINING", regexp.MustCompile(`run\s+PAUSED \(DRAINING: 1 step\(s\) in flight\)$`))
	runOut.waitFor(t, "the pause on the run's console", regexp.MustCompile(`^PAUSED by alice \(deploy window\): no new steps start; 1 step\(s\) in flight draining$`))

	release()
	follow.waitFor(t, "the held step done", regexp.MustCompile(`step\s+model\.held\s+SUCCESS`))
	follow.waitFor(t, "drained", regexp.MustCompile(`run\s+PAUSED \(drained: no step in flight\)$`))
	runOut.waitFor(t, "drained on the run's console", regexp.MustCompile(`^Drained: no step in flight`))
	if line := follow.find(regexp.MustCompile(`model\.after`)); line != "" {
		t.Fatalf("model.after started while the run was PAUSED: %s", line)
	}

	// Hold model.after too, so that the follower sees the run RUNNING again.
	release = holdWarehouse(t, filepath.Join(h.dir, "warehouse.db"))
	code, stdout, stderr = oneShot("signal", runID, "resume", "--actor", "alice")
	if code != 0 || !strings.Contains(stdout, "RESUME accepted by the runner") {
		t.Fatalf("resume: exit %d\n%s\n%s", code, stdout, stderr)
	}
	follow.waitFor(t, "model.after in flight", regexp.MustCompile(`step\s+model\.after\s+RUNNING`))
	follow.waitFor(t, "RUNNING again", regexp.MustCompile(`run\s+RUNNING$`))
	release()
	follow.waitFor(t, "COMPLETED", regexp.MustCompile(`run\s+COMPLETED$`))
	if err := followCmd.Wait(); err != nil {
		t.Fatalf("follow exited with %v (want 0, as the COMPLETED run)\n%s\n%s", err, follow.text(), followErr)
	}
	<-follow.done
	if err := runCmd.Wait(); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, runOut.text(), runErr)
	}
	<-runOut.done
	runOut.waitFor(t, "the resume on the run's console", regexp.MustCompile(`^RESUMED by alice$`))

	// The follower's story, in order.
	text := follow.text()
	order := []string{"run   RUNNING", "model.held", "PAUSED (DRAINING", "model.held                               SUCCESS", "drained", "model.after", "run   RUNNING", "SUCCESS", "run   COMPLETED", "Run " + runID + " COMPLETED"}
	at := 0
	for _, want := range order {
		i := strings.Index(text[at:], want)
		if i < 0 {
			t.Fatalf("follow output lacks %q after offset %d:\n%s", want, at, text)
		}
		at += i + len(want)
	}
	if strings.Contains(text, "\x1b") || strings.Contains(runOut.text(), "\x1b") {
		t.Errorf("a control character reached the terminal")
	}

	// The log: the rejection is recorded with its reason and actor, and the
	// run was never cancelled.
	snap := h.checkLog(runID)
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("run %s", snap.Status)
	}
	var rejected, cancelled int
	for _, e := range h.events(runID) {
		switch e.EventType {
		case engine.SignalRejected:
			rejected++
			p := string(e.Payload)
			if !strings.Contains(p, `"requestedBy":"mallory"`) || !strings.Contains(p, "no rule of the signals policy allows it") {
				t.Errorf("SignalRejected payload %s", p)
			}
		case engine.RunCancelled:
			cancelled++
		}
	}
	if rejected != 1 || cancelled != 0 {
		t.Errorf("%d SignalRejected, %d RunCancelled; want 1 and 0", rejected, cancelled)
	}
}
