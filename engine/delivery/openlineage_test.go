package delivery_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/delivery"
	"github.com/dvtrun/dvtrun/engine/lineage"
	"github.com/dvtrun/dvtrun/engine/lineage/lineagetest"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// noPlans is a state store with no plan bundles: only plan-run events map.
type noPlans struct{}

func (noPlans) RunBundle(context.Context, string) (*plan.Bundle, string, bool, error) {
	return nil, "", false, nil
}

func olRecords() []engine.RunEventRecord {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	var out []engine.RunEventRecord
	for i, typ := range []engine.EventType{engine.RunQueued, engine.RunStarted, engine.SignalAccepted, engine.RunCompleted} {
		out = append(out, engine.RunEventRecord{RunEventWrite: engine.RunEventWrite{
			EventID: "e" + string(rune('0'+i)), EventType: typ, EmittedAt: at.Add(time.Duration(i) * time.Second),
			RunID: "9f0c6a1e-2b5d-4c1e-8f3a-1d2e3f4a5b6c", PlanID: "shop", LogicalAttemptID: 1,
		}, RunSeq: int64(i + 1)})
	}
	return out
}

func olMapper(t *testing.T) *lineage.Mapper {
	t.Helper()
	m, err := lineage.NewMapper(lineage.Options{Naming: lineage.SQLiteNaming("/w.db"), Plans: noPlans{}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestOpenLineageHTTP: one POST per lineage event to <url>/api/v1/lineage
// with the bearer token; events without one count as delivered; a failure
// stops at the event that failed and does not repeat the token.
func TestOpenLineageHTTP(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	fail := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/base/api/v1/lineage" || r.Header.Get("Authorization") != "Bearer tok-123" {
			http.Error(w, "bad request "+r.URL.Path, http.StatusBadRequest)
			return
		}
		if fail {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		bodies = append(bodies, string(b))
	}))
	defer srv.Close()
	s, err := delivery.NewOpenLineage(delivery.OpenLineageOptions{Mapper: olMapper(t), URL: srv.URL + "/base/", Token: "tok-123", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if s.MaxBatch() != 1 {
		t.Errorf("MaxBatch %d, want 1 request per event", s.MaxBatch())
	}
	recs := olRecords()
	n, err := s.Deliver(ctx, recs)
	if err != nil || n != len(recs) {
		t.Fatalf("Deliver: %d, %v", n, err)
	}
	if len(bodies) != 2 || !strings.Contains(bodies[0], `"START"`) || !strings.Contains(bodies[1], `"COMPLETE"`) {
		t.Fatalf("bodies %v, want the run's START and COMPLETE", bodies)
	}
	for _, b := range bodies {
		if err := lineagetest.Validate([]byte(b)); err != nil {
			t.Error(err)
		}
	}
	fail = true
	n, err = s.Deliver(ctx, recs)
	if n != 1 || err == nil || !strings.Contains(err.Error(), "HTTP 503") || strings.Contains(err.Error(), "tok-123") {
		t.Errorf("Deliver to a failing server: %d, %v; want 1 (RunQueued has no event) and an HTTP 503 without the token", n, err)
	}
}

// TestOpenLineageFile: one event per line, in order; a batch with no
// lineage event writes nothing and counts as delivered.
func TestOpenLineageFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "lineage.jsonl")
	s, err := delivery.NewOpenLineage(delivery.OpenLineageOptions{Mapper: olMapper(t), Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := olRecords()
	if n, err := s.Deliver(ctx, recs[:1]); n != 1 || err != nil {
		t.Fatalf("Deliver(RunQueued): %d %v", n, err)
	}
	if n, err := s.Deliver(ctx, recs); n != len(recs) || err != nil {
		t.Fatalf("Deliver: %d %v", n, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), b)
	}
	for i, want := range []string{"START", "COMPLETE"} {
		var e lineage.Event
		if err := json.Unmarshal([]byte(lines[i]), &e); err != nil || e.EventType != want || e.Run.RunID != lineage.PlanRunID(recs[0].RunID) {
			t.Errorf("line %d: %+v %v", i+1, e, err)
		}
	}
}

func TestOpenLineageOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    delivery.OpenLineageOptions
		code engine.Code
	}{
		{"no mapper", delivery.OpenLineageOptions{URL: "http://x"}, engine.CodeInvalidArgument},
		{"no scheme", delivery.OpenLineageOptions{Mapper: olMapper(t), URL: "marquez:5000", Token: "secret-tok"}, engine.CodeConfigInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := delivery.NewOpenLineage(tc.o)
			if engine.CodeOf(err) != tc.code || (err != nil && strings.Contains(err.Error(), "secret-tok")) {
				t.Errorf("err %v, want %s", err, tc.code)
			}
		})
	}
}
