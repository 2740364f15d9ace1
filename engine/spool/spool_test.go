package spool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/runner"
)

// event is the i-th test event of runID; its payload keeps what
// encoding/json would rewrite (spaces, <, &, key order).
func event(runID string, i int) engine.RunEventWrite {
	return engine.RunEventWrite{
		EventID:          fmt.Sprintf("ev-%04d", i),
		EventType:        engine.EventType("StepStarted"),
		EmittedAt:        time.Date(2026, 11, 23, 21, 0, 0, 123456789+i, time.FixedZone("", 5*3600+1800)),
		RunID:            runID,
		TenantID:         "t",
		ProjectID:        "p",
		EnvironmentID:    "dev",
		PlanID:           "shop",
		PlanVersion:      "1",
		EngineAttemptID:  1 + i%3,
		LogicalAttemptID: 1,
		IdempotencyKey:   fmt.Sprintf("%s|step_%d|StepStarted", runID, i),
		StepID:           fmt.Sprintf("step_%d", i),
		Payload:          json.RawMessage(fmt.Sprintf(`{ "z": %d,  "a": "<b> & é" }`, i)),
	}
}

// sameEvents fails unless got is want, field by field: payload bytes, ids
// and instants with their offsets.
func sameEvents(t *testing.T, got, want []engine.RunEventWrite) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		_, goff := g.EmittedAt.Zone()
		_, woff := w.EmittedAt.Zone()
		if !g.EmittedAt.Equal(w.EmittedAt) || goff != woff {
			t.Errorf("event %d: emittedAt %v, want %v", i, g.EmittedAt, w.EmittedAt)
		}
		if !bytes.Equal(g.Payload, w.Payload) {
			t.Errorf("event %d: payload %q, want %q", i, g.Payload, w.Payload)
		}
		g.EmittedAt, w.EmittedAt, g.Payload, w.Payload = time.Time{}, time.Time{}, nil, nil
		if !reflect.DeepEqual(g, w) {
			t.Errorf("event %d: %+v, want %+v", i, g, w)
		}
	}
}

func open(t *testing.T, dir string) *Dir {
	t.Helper()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func pending(t *testing.T, d *Dir, runID string) []engine.RunEventWrite {
	t.Helper()
	evs, err := d.Pending(runID)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// files lists the regular files under dir, relative to it.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return err
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	odd := event("r", 7)
	odd.Payload = json.RawMessage("{\"s\":\"\\u00e9\\n\",\n\t\"n\": 1.50}")
	odd.EmittedAt = time.Date(1999, 12, 31, 23, 59, 59, 1, time.UTC)
	odd.StepID = ""
	noPayload := event("r", 8)
	noPayload.Payload = nil
	cases := []struct {
		name string
		puts [][]engine.RunEventWrite
	}{
		{"one event", [][]engine.RunEventWrite{{event("r", 0)}}},
		{"a batch", [][]engine.RunEventWrite{{event("r", 0), event("r", 1), event("r", 2)}}},
		{"puts in order", [][]engine.RunEventWrite{{event("r", 3)}, {event("r", 1), event("r", 2)}, {event("r", 0)}}},
		{"whitespace, escapes, utc, no step", [][]engine.RunEventWrite{{odd}}},
		{"no payload", [][]engine.RunEventWrite{{noPayload}, {event("r", 9)}}},
		{"empty put", [][]engine.RunEventWrite{{}, {event("r", 0)}, nil}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "spool")
			d := open(t, dir)
			var want []engine.RunEventWrite
			for _, p := range tc.puts {
				if err := d.Put("r", p); err != nil {
					t.Fatal(err)
				}
				want = append(want, p...)
			}
			sameEvents(t, pending(t, d, "r"), want)
			// Another process (a new Dir) reads the same.
			sameEvents(t, pending(t, open(t, dir), "r"), want)
		})
	}
}

// TestNoFileForNothing: a spool that is opened, read, cleared and handed
// empty puts creates nothing, not even its directory.
func TestNoFileForNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "spool")
	d := open(t, dir)
	if err := d.Put("r", nil); err != nil {
		t.Fatal(err)
	}
	if evs := pending(t, d, "r"); len(evs) != 0 {
		t.Errorf("pending = %v", evs)
	}
	if err := d.Clear("r"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the spool created %s: %v", filepath.Dir(dir), err)
	}
}

// torn writes lines of events 0 and 1 of run r and then tail, as a crash
// mid-Put leaves the file.
func torn(t *testing.T, dir, tail string) {
	t.Helper()
	d := open(t, dir)
	if err := d.Put("r", []engine.RunEventWrite{event("r", 0), event("r", 1)}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(d.file("r"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(tail); err != nil {
		t.Fatal(err)
	}
}

func TestTornLastLine(t *testing.T) {
	whole, err := encodeLine(event("r", 2), "r")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, tail string }{
		{"half a line", string(whole[:len(whole)/2])},
		{"all but the newline", string(whole[:len(whole)-1])},
		{"zeroes", "\x00\x00\x00\x00"},
		{"zeroes then newline", "\x00\x00\x00\n"},
		{"garbage line", "{\"eventId\":\n"},
		{"a line of another run", strings.Replace(string(whole), `"runId":"r"`, `"runId":"x"`, 1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			torn(t, dir, tc.tail)
			want := []engine.RunEventWrite{event("r", 0), event("r", 1)}
			sameEvents(t, pending(t, open(t, dir), "r"), want)
			// The next runner's Put cuts the torn line off and appends.
			d := open(t, dir)
			if err := d.Put("r", []engine.RunEventWrite{event("r", 3)}); err != nil {
				t.Fatal(err)
			}
			want = append(want, event("r", 3))
			sameEvents(t, pending(t, open(t, dir), "r"), want)
			data, err := os.ReadFile(d.file("r"))
			if err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(data, []byte("\n")); n != 3 || data[len(data)-1] != '\n' {
				t.Errorf("file has %d lines after the repair:\n%s", n, data)
			}
		})
	}
}

func TestCorruptMiddleLine(t *testing.T) {
	cases := []struct{ name, line string }{
		{"garbage", "not json\n"},
		{"empty line", "\n"},
		{"unknown field", `{"eventId":"e","eventType":"StepStarted","runId":"r","idempotencyKey":"k","color":"red"}` + "\n"},
		{"event of another run", `{"eventId":"e","eventType":"StepStarted","runId":"x","idempotencyKey":"k"}` + "\n"},
		{"no event id", `{"eventType":"StepStarted","runId":"r","idempotencyKey":"k"}` + "\n"},
		{"two values", `{"eventId":"e","eventType":"StepStarted","runId":"r","idempotencyKey":"k"} {}` + "\n"},
		{"payload not base64", `{"eventId":"e","eventType":"StepStarted","runId":"r","idempotencyKey":"k","payload":{"a":1}}` + "\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := open(t, dir)
			var data []byte
			for _, part := range []any{event("r", 0), tc.line, event("r", 1)} {
				if s, ok := part.(string); ok {
					data = append(data, s...)
					continue
				}
				l, err := encodeLine(part.(engine.RunEventWrite), "r")
				if err != nil {
					t.Fatal(err)
				}
				data = append(data, l...)
			}
			if err := os.WriteFile(d.file("r"), data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := open(t, dir).Pending("r")
			wantCorrupt(t, err, d.file("r"), "line 2")
			// A put onto a corrupt file is refused and changes nothing.
			err = open(t, dir).Put("r", []engine.RunEventWrite{event("r", 2)})
			wantCorrupt(t, err, d.file("r"), "line 2")
			if after, _ := os.ReadFile(d.file("r")); !bytes.Equal(data, after) {
				t.Errorf("a put changed a corrupt file")
			}
		})
	}
}

func wantCorrupt(t *testing.T, err error, path, line string) {
	t.Helper()
	if engine.CodeOf(err) != engine.CodeStoreCorrupt || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), line+" is corrupt") {
		t.Fatalf("got %v, want STORE_CORRUPT naming %s and %s", err, path, line)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error spans lines: %q", err)
	}
}

func TestClear(t *testing.T) {
	dir := t.TempDir()
	d := open(t, dir)
	for _, id := range []string{"a", "b"} {
		if err := d.Put(id, []engine.RunEventWrite{event(id, 0), event(id, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Clear("a"); err != nil {
		t.Fatal(err)
	}
	if evs := pending(t, open(t, dir), "a"); len(evs) != 0 {
		t.Errorf("after Clear: %d events pending", len(evs))
	}
	if fs := files(t, dir); len(fs) != 1 || fs[0] != filepath.Base(d.file("b")) {
		t.Errorf("files after clearing a: %v", fs)
	}
	sameEvents(t, pending(t, d, "b"), []engine.RunEventWrite{event("b", 0), event("b", 1)})
	if err := d.Clear("a"); err != nil {
		t.Errorf("second Clear: %v", err)
	}
	// A put after Clear starts the run's file afresh.
	if err := d.Put("a", []engine.RunEventWrite{event("a", 2)}); err != nil {
		t.Fatal(err)
	}
	sameEvents(t, pending(t, open(t, dir), "a"), []engine.RunEventWrite{event("a", 2)})
}

// TestConcurrentPuts: runs put at once, two writers on some runs; every
// run reads back its own events, each put's batch whole and in order.
func TestConcurrentPuts(t *testing.T) {
	dir := t.TempDir()
	d := open(t, dir)
	const runs, writers, puts = 8, 2, 25
	var wg sync.WaitGroup
	errs := make(chan error, runs*writers)
	for r := range runs {
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("run-%d", r)
				for p := range puts {
					i := (w*puts + p) * 2
					if err := d.Put(id, []engine.RunEventWrite{event(id, i), event(id, i+1)}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for r := range runs {
		id := fmt.Sprintf("run-%d", r)
		evs := pending(t, d, id)
		if len(evs) != writers*puts*2 {
			t.Fatalf("%s: %d events, want %d", id, len(evs), writers*puts*2)
		}
		next := map[int]int{} // writer -> next index it put
		for k := 0; k < len(evs); k += 2 {
			var i int
			fmt.Sscanf(evs[k].EventID, "ev-%d", &i)
			w := i / (puts * 2)
			if i != w*puts*2+next[w] {
				t.Fatalf("%s: event %s out of its writer's order", id, evs[k].EventID)
			}
			sameEvents(t, evs[k:k+2], []engine.RunEventWrite{event(id, i), event(id, i+1)})
			next[w] += 2
		}
	}
}

// TestHostileRunID: whatever a run id holds, its file is a plain file in
// the directory, and no two ids share one.
func TestHostileRunID(t *testing.T) {
	ids := []string{"../x", "../../etc/passwd", "/abs/path", `a\b`, ".", "..", "nul\x00byte", "new\nline",
		strings.Repeat("long", 2500), "CON", "ABC", "abc", "ünï©ødé", "run-x", "run_x", " "}
	root := t.TempDir()
	dir := filepath.Join(root, "spool")
	d := open(t, dir)
	for k, id := range ids {
		if err := d.Put(id, []engine.RunEventWrite{event(id, k)}); err != nil {
			t.Fatalf("%q: %v", id, err)
		}
	}
	fs := files(t, root)
	if len(fs) != len(ids) {
		t.Fatalf("%d files for %d run ids: %v", len(fs), len(ids), fs)
	}
	for _, f := range fs {
		if filepath.Dir(f) != "spool" || len(filepath.Base(f)) > 120 {
			t.Errorf("file %q is not a short name in the spool directory", f)
		}
	}
	for k, id := range ids {
		sameEvents(t, pending(t, open(t, dir), id), []engine.RunEventWrite{event(id, k)})
	}
	for _, call := range []func() error{
		func() error { return d.Put("", []engine.RunEventWrite{event("", 0)}) },
		func() error { _, err := d.Pending(""); return err },
		func() error { return d.Clear("") },
	} {
		if err := call(); engine.CodeOf(err) != engine.CodeInvalidArgument {
			t.Errorf("empty run id: %v, want INVALID_ARGUMENT", err)
		}
	}
}

func TestPutRefusesBadEvents(t *testing.T) {
	other := event("x", 0)
	noKey := event("r", 1)
	noKey.IdempotencyKey = ""
	cases := []struct {
		name string
		ev   engine.RunEventWrite
		want string
	}{
		{"another run's event", other, `is of run "x", not "r"`},
		{"no idempotency key", noKey, "lacks its eventId, eventType or idempotencyKey"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := open(t, dir)
			err := d.Put("r", []engine.RunEventWrite{event("r", 0), tc.ev})
			if engine.CodeOf(err) != engine.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want INVALID_ARGUMENT with %q", err, tc.want)
			}
			if fs := files(t, dir); len(fs) != 0 {
				t.Errorf("a refused put wrote %v", fs)
			}
		})
	}
}

func TestOpenRefusesAFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{p, ""} {
		if _, err := Open(dir); engine.CodeOf(err) != engine.CodeInvalidArgument {
			t.Errorf("Open(%q): %v, want INVALID_ARGUMENT", dir, err)
		}
	}
}

// The runner's writer takes a *Dir as its Spool.
var _ runner.Spool = (*Dir)(nil)
