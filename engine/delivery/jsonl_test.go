package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

func events(runID string, from, to int64) []engine.RunEventRecord {
	var out []engine.RunEventRecord
	for s := from; s <= to; s++ {
		out = append(out, engine.RunEventRecord{RunEventWrite: engine.RunEventWrite{EventID: fmt.Sprintf("%s-%d", runID, s), RunID: runID, EventType: engine.StepStarted,
			Payload: json.RawMessage(`{"note":"line\nbreak"}`)}, RunSeq: s})
	}
	return out
}

func TestJSONLAppendsInOrderAndReopens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "events.jsonl") // the directory is created
	j, err := OpenJSONL(path)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := j.Deliver(context.Background(), events("a", 1, 3)); n != 3 || err != nil {
		t.Fatalf("Deliver = %d, %v", n, err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := j.Deliver(context.Background(), events("a", 4, 4)); n != 0 || err == nil {
		t.Fatalf("Deliver after Close = %d, %v", n, err)
	}
	j, err = OpenJSONL(path) // a reopened file appends
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if n, err := j.Deliver(context.Background(), events("b", 1, 2)); n != 2 || err != nil {
		t.Fatalf("Deliver = %d, %v", n, err)
	}
	got, err := ReadJSONL(path)
	if err != nil {
		t.Fatal(err)
	}
	want := append(events("a", 1, 3), events("b", 1, 2)...)
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].EventID != want[i].EventID || got[i].RunSeq != want[i].RunSeq || string(got[i].Payload) != string(want[i].Payload) {
			t.Fatalf("line %d = %+v, want %+v", i+1, got[i], want[i])
		}
	}
}

// failingFile fails Write or Sync.
type failingFile struct {
	writes    int
	failWrite bool
	failSync  bool
	synced    bool
}

func (f *failingFile) Write(p []byte) (int, error) {
	f.writes++
	if f.failWrite {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func (f *failingFile) Sync() error {
	if f.failSync {
		return errors.New("EIO")
	}
	f.synced = true
	return nil
}

func (f *failingFile) Close() error { return nil }

// Nothing counts as delivered unless the write and the fsync succeeded.
func TestJSONLCountsOnlySyncedWrites(t *testing.T) {
	cases := []struct {
		name string
		f    *failingFile
		n    int
		want string
	}{
		{"ok", &failingFile{}, 3, ""},
		{"write fails", &failingFile{failWrite: true}, 0, "disk full"},
		{"sync fails", &failingFile{failSync: true}, 0, "sync x.jsonl: EIO"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := &JSONL{path: "x.jsonl", f: tc.f}
			n, err := j.Deliver(context.Background(), events("a", 1, 3))
			if n != tc.n || (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Deliver = %d, %v; want %d, %q", n, err, tc.n, tc.want)
			}
			if tc.want == "" && (!tc.f.synced || tc.f.writes != 1) {
				t.Fatalf("3 events took %d writes, synced=%v; want one write and a sync", tc.f.writes, tc.f.synced)
			}
		})
	}
}

func TestPolicyDelay(t *testing.T) {
	p := Policy{Backoff: 100 * time.Millisecond, MaxBackoff: 1000 * time.Millisecond, Jitter: 0.2}.WithDefaults()
	cases := []struct {
		failures int
		r        float64
		want     int64 // ms
	}{
		{1, 0.5, 100}, {2, 0.5, 200}, {3, 0.5, 400}, {4, 0.5, 800}, {5, 0.5, 1000}, {40, 0.5, 1000},
		{1, 0, 80}, {1, 0.999999, 119}, {3, 0, 320},
		{5, 0.999999, 1000}, // jitter never exceeds the cap
	}
	for _, tc := range cases {
		if got := p.Delay(tc.failures, tc.r).Milliseconds(); got != tc.want {
			t.Errorf("Delay(%d, %v) = %dms, want %dms", tc.failures, tc.r, got, tc.want)
		}
	}
	d := Policy{}.WithDefaults()
	if d.MaxAttempts != 10 || d.Backoff.Seconds() != 1 || d.MaxBackoff.Minutes() != 5 || d.MaxAge.Hours() != 24 || d.Jitter != 0.2 {
		t.Errorf("defaults %+v", d)
	}
}
