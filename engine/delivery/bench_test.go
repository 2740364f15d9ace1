package delivery_test

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/delivery"
)

// seedEvents writes n events (runs of up to 100) into a fresh store.
func seedEvents(b *testing.B, n int) delivery.Store {
	b.Helper()
	st := openStore(b)
	for n > 0 {
		per := min(n, 100)
		steps := max((per-2)/2, 0)
		seedRuns(b, st, 1, steps)
		n -= 2 + 2*steps
	}
	return st
}

func benchDrain(b *testing.B, st delivery.Store, target delivery.Target, want int) {
	b.Helper()
	svc := newService(b, st, engine.ClockFunc(timeNow), target)
	r, err := svc.Drain(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if r.Delivered < want || r.Pending != 0 {
		b.Fatalf("drain %+v, want %d delivered", r, want)
	}
}

func fastReceiver(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkWebhookDelivery: events per second to a local webhook (one
// signed request and one store update per event).
func BenchmarkWebhookDelivery(b *testing.B) {
	srv := fastReceiver(b)
	st := seedEvents(b, b.N)
	b.ResetTimer()
	benchDrain(b, st, delivery.Target{Name: "hooks", Sink: webhook(b, srv.URL, engine.ClockFunc(timeNow))}, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkJSONLDelivery: events per second to a JSONL file (one write and
// fsync per run's batch).
func BenchmarkJSONLDelivery(b *testing.B) {
	j, err := delivery.OpenJSONL(filepath.Join(b.TempDir(), "events.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	st := seedEvents(b, b.N)
	b.ResetTimer()
	benchDrain(b, st, delivery.Target{Name: "archive", Sink: j}, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkDrainBurst10k: the time to drain a backlog of 10,000 events
// (100 runs × 100) to a local webhook; one op is one whole drain.
func BenchmarkDrainBurst10k(b *testing.B) {
	srv := fastReceiver(b)
	for range b.N {
		b.StopTimer()
		st := seedEvents(b, 10000)
		b.StartTimer()
		benchDrain(b, st, delivery.Target{Name: "hooks", Sink: webhook(b, srv.URL, engine.ClockFunc(timeNow))}, 10000)
	}
	b.ReportMetric(10000*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
