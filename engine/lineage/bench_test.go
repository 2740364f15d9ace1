package lineage_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/lineage"
)

// BenchmarkMapStepCompleted is the sink's cost per step event: mapping a
// model's StepCompleted (its plan cached) and encoding it.
func BenchmarkMapStepCompleted(b *testing.B) {
	bundle := loadShop(b)
	m, err := lineage.NewMapper(lineage.Options{Naming: lineage.SQLiteNaming("/w.db"), Plans: bundles{runID: bundle}})
	if err != nil {
		b.Fatal(err)
	}
	r := rec(engine.StepCompleted, "model.orders_enriched", 1, `{"rowCount":48,"durationMs":5,"queryIds":["01b2"],"sql":"select 1"}`)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ev, err := m.Map(ctx, r)
		if err != nil || ev == nil {
			b.Fatal(ev, err)
		}
		if _, err := json.Marshal(ev); err != nil {
			b.Fatal(err)
		}
	}
}
