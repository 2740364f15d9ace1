package snowflake_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runner"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// crashingLog is the Snowflake store, except that appends carrying the
// StepCompleted of one step fail while crash is set: the runner dies, as
// far as the log knows, after the step's warehouse transaction committed
// and before its StepCompleted was stored.
type crashingLog struct {
	*snowflake.Store
	step  string
	crash atomic.Bool
}

func (l *crashingLog) AppendFenced(ctx context.Context, lease engine.Lease, events []engine.RunEventWrite) (engine.AppendResult, error) {
	for _, e := range events {
		if l.crash.Load() && e.EventType == engine.StepCompleted && e.StepID == l.step {
			return engine.AppendResult{}, engine.Errorf(engine.CodeStoreUnavailable, "the runner died here")
		}
	}
	return l.Store.AppendFenced(ctx, lease, events)
}

// TestExactlyOnceDMLStep is the exactly-once case on the Snowflake test
// server, in-process (the runner and both databases through gosnowflake;
// the process tests in cmd/dvtrun cover SQLite): a DML sql step commits
// in the warehouse, its StepCompleted is lost, and another runner resumes
// the run. The step's effect happens once, its StepCompleted carries the
// ledger's result, and the Go reducer and the SQL projection agree.
func TestExactlyOnceDMLStep(t *testing.T) {
	w, srv := openWarehouse(t)
	st := openStore(t, srv.DSN("dvt", "state"), snowflake.Options{})
	t.Cleanup(func() { st.Close() })
	if _, err := w.DB().ExecContext(ctx, "CREATE TABLE effects (n INTEGER)"); err != nil {
		t.Fatal(err)
	}
	p, err := plan.Parse([]byte(`
planId: sf_effects
planVersion: "1"
steps:
  - {id: sql.insert, kind: sql, sql: "INSERT INTO effects VALUES (1); UPDATE effects SET n = n + 10"}
  - {id: test.once, kind: test, sql: "SELECT * FROM effects WHERE n <> 11", dependsOn: [sql.insert]}
`), "plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	log := &crashingLog{Store: st, step: "sql.insert"}
	log.crash.Store(true)
	clock := engine.ClockFunc(time.Now)
	ids := engine.IDFunc(uuid.NewString)
	cfg := engine.Config{TenantID: "acme", ProjectID: "shop", EnvironmentID: "test"}
	eng := &engine.Engine{Log: st, Clock: clock, IDs: ids, Config: cfg}
	runID, err := eng.StartRun(ctx, engine.StartRequest{Plan: p})
	if err != nil {
		t.Fatal(err)
	}
	newRunner := func(owner string) *runner.Runner {
		return &runner.Runner{Log: log, Clock: clock, IDs: ids,
			Sleep:  func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
			Config: runner.Config{Config: cfg, Owner: owner, Threads: 2, LeaseTTL: time.Minute}}
	}
	if _, err := newRunner("runner-a").Execute(ctx, runID, p, w); engine.CodeOf(err) != engine.CodeStoreUnavailable {
		t.Fatalf("first runner: %v, want it stopped by the lost append", err)
	}
	if n := countRows(t, w, "effects"); n != 1 {
		t.Fatalf("effects = %d rows after the first runner, want 1 (the step committed)", n)
	}
	log.crash.Store(false)
	snap, err := newRunner("runner-b").Resume(ctx, runID, p, w)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Status != engine.StatusCompleted {
		t.Fatalf("resumed run is %s", snap.Status)
	}
	if n := countRows(t, w, "effects"); n != 1 {
		t.Fatalf("effects = %d rows, want 1: the resumed runner repeated the step", n)
	}
	evs, err := st.ListEvents(ctx, runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var completed []engine.RunEventRecord
	for _, e := range evs {
		if e.EventType == engine.StepCompleted && e.StepID == "sql.insert" {
			completed = append(completed, e)
		}
	}
	var pl struct {
		RowsAffected int64           `json:"rowsAffected"`
		QueryIDs     []string        `json:"queryIds"`
		Ledger       json.RawMessage `json:"ledger"`
	}
	if len(completed) != 1 || json.Unmarshal(completed[0].Payload, &pl) != nil || pl.RowsAffected != 2 || len(pl.QueryIDs) != 2 || len(pl.Ledger) == 0 {
		t.Fatalf("StepCompleted of sql.insert: %d event(s), payload %s; want one, with the ledger's result", len(completed), completed[0].Payload)
	}
	goSnap := engine.Project(runID, evs)
	if goSnap.Inconsistent || goSnap.Status != engine.StatusCompleted {
		t.Fatalf("reducer: %s inconsistent=%v", goSnap.Status, goSnap.Inconsistent)
	}
	sqlSnap, err := st.ProjectSQL(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if diffs := engine.DiffSnapshots(sqlSnap, goSnap); len(diffs) > 0 {
		t.Fatalf("SQL projection and reducer disagree: %v", diffs)
	}
}

// TestLeaseExpiresByDatabaseClock: without an injected clock, a lease's
// expiry is decided by the database's CURRENT_TIMESTAMP(), and a takeover
// after expiry raises the fence.
func TestLeaseExpiresByDatabaseClock(t *testing.T) {
	srv := sftest.Start(t)
	st := openStore(t, srv.DSN("dvt", "leases"), snowflake.Options{})
	t.Cleanup(func() { st.Close() })
	f := storetest.NewFixture()
	f.Bootstrap(t, st)
	a, err := st.AcquireFencedLease(ctx, f.Meta.RunID, "runner-a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireFencedLease(ctx, f.Meta.RunID, "runner-b", time.Second); !errors.Is(err, engine.ErrLeaseHeld) {
		t.Fatalf("before expiry: %v, want LEASE_HELD", err)
	}
	time.Sleep(time.Until(a.ExpiresAt) + 100*time.Millisecond)
	b, err := st.AcquireFencedLease(ctx, f.Meta.RunID, "runner-b", time.Second)
	if err != nil || b.Fence != a.Fence+1 {
		t.Fatalf("after expiry: %+v %v, want fence %d", b, err, a.Fence+1)
	}
}
