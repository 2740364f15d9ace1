package spool

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// childEnv names the spool directory of the putting child process.
const childEnv = "DVT_SPOOL_TEST_CHILD_DIR"

// childEvent is the i-th event the child puts: payloads of varied size,
// up to a few pages, so that puts straddle page boundaries.
func childEvent(i int) engine.RunEventWrite {
	ev := event("r", i)
	ev.Payload = json.RawMessage(fmt.Sprintf(`{"i": %d, "pad": "%s"}`, i, strings.Repeat("x", i*997%9000)))
	return ev
}

// TestPutChild is the child of TestProcessSIGKILL (re-exec of the test
// binary): it puts batches of 1 to 3 events in a loop and prints how many
// events are durable after each Put, until it is killed.
func TestPutChild(t *testing.T) {
	dir := os.Getenv(childEnv)
	if dir == "" {
		return // only as a child
	}
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute) // never outlive a lost parent
	for n, k := 0, 0; time.Now().Before(deadline); k++ {
		var batch []engine.RunEventWrite
		for range 1 + k%3 {
			batch = append(batch, childEvent(n))
			n++
		}
		if err := d.Put("r", batch); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("acked %d\n", n)
	}
}

// TestProcessSIGKILL: a process putting in a loop is SIGKILLed at a
// different point each trial; Pending afterwards returns a prefix of what
// it put, every event whole, holding at least every event a returned Put
// acknowledged; and the next Put appends after it.
func TestProcessSIGKILL(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		return
	}
	for trial := range 4 {
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestPutChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnv+"="+dir)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill() // a child that outlived a failed test
			killAt := 10 + trial*57
			acked := 0
			sc := bufio.NewScanner(out)
			for acked < killAt && sc.Scan() {
				n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "acked "))
				if err != nil {
					t.Fatalf("child said %q", sc.Text())
				}
				acked = n
			}
			if acked < killAt {
				t.Fatalf("child stopped after %d events: %v", acked, sc.Err())
			}
			// The child keeps putting (its output is buffered): the kill
			// lands at a point in a Put no test chose.
			time.Sleep(time.Duration(trial) * 7 * time.Millisecond)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()

			d := open(t, dir)
			got := pending(t, d, "r")
			if len(got) < acked {
				t.Fatalf("%d events pending, but the child's Puts had acknowledged %d", len(got), acked)
			}
			want := make([]engine.RunEventWrite, len(got))
			for i := range want {
				want[i] = childEvent(i)
			}
			sameEvents(t, got, want)
			next := childEvent(len(got))
			if err := d.Put("r", []engine.RunEventWrite{next}); err != nil {
				t.Fatal(err)
			}
			sameEvents(t, pending(t, open(t, dir), "r"), append(want, next))
			t.Logf("killed after %d acknowledged events; %d pending", acked, len(got))
		})
	}
}
