package snowflake_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// The start path of a run (issue 11) costs one HTTP request per step, each
// counted at the driver's transport: opening a store on a current schema,
// taking or renewing the run's lease, and starting the run.

// tripsAfterLogin is what tr counted besides logins, with the kinds in the
// message when it differs from want.
func tripsAfterLogin(t *testing.T, what string, tr *sftest.CountingTransport, want int64) {
	t.Helper()
	if n := tr.Count() - tr.Count(sftest.TripLogin); n != want {
		t.Errorf("%s: %d HTTP round trips after login (%d query, %d result, %d other), want %d", what, n,
			tr.Count(sftest.TripQuery), tr.Count(sftest.TripResult), tr.Count(sftest.TripOther), want)
	}
}

// TestOpenOfACurrentSchemaIsOneRequest: Open reads the applied versions
// first and stops there when none is missing; a schema whose version table
// exists but lacks versions still migrates. The driver's connection
// telemetry, a request of its own, is off unless the DSN asks for it.
func TestOpenOfACurrentSchemaIsOneRequest(t *testing.T) {
	srv := sftest.Start(t)
	cases := []struct {
		name      string
		prepare   func(t *testing.T, schema string) // before the counted Open
		dsnParams string
		trips     int64 // -1: not counted (migrates)
	}{
		{name: "current schema", trips: 1, prepare: func(t *testing.T, schema string) {
			openStore(t, srv.DSN("dvt", schema), snowflake.Options{}).Close()
		}},
		{name: "version table without versions: migrates", trips: -1, prepare: func(t *testing.T, schema string) {
			db := srv.OpenDB(t, "DVT", schema)
			if _, err := db.ExecContext(ctx, "CREATE TABLE dvt_schema_version (version NUMBER(38, 0) NOT NULL, name VARCHAR NOT NULL, applied_at TIMESTAMP_TZ(9) NOT NULL)"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "fresh schema: migrates", trips: -1},
		{name: "current schema, driver telemetry asked for: one more", dsnParams: "&disableTelemetry=false", trips: 2, prepare: func(t *testing.T, schema string) {
			openStore(t, srv.DSN("dvt", schema), snowflake.Options{}).Close()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			schema := fmt.Sprintf("open_%d", freshSchemas.Add(1))
			if c.prepare != nil {
				c.prepare(t, schema)
			}
			tr := &sftest.CountingTransport{}
			s := openStore(t, srv.DSN("dvt", schema)+c.dsnParams, snowflake.Options{Transporter: tr})
			defer s.Close()
			if c.trips >= 0 {
				tripsAfterLogin(t, "Open", tr, c.trips)
			}
			// Whatever the path, the schema is complete: a run can start.
			f := storetest.NewFixture()
			f.Bootstrap(t, s)
			var versions int
			if err := s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM dvt_schema_version").Scan(&versions); err != nil || versions < 3 {
				t.Fatalf("%d versions recorded (%v)", versions, err)
			}
		})
	}
}

// TestAcquireFencedLeaseIsOneRequest: the first acquire, a renewal, a
// refusal and a takeover are one request each, on the store's clock and on
// the database's, with the fence rules of the conformance suite.
func TestAcquireFencedLeaseIsOneRequest(t *testing.T) {
	srv := sftest.Start(t)
	for _, clock := range []string{"store clock", "database clock"} {
		t.Run(clock, func(t *testing.T) {
			tr := &sftest.CountingTransport{}
			opts := snowflake.Options{Transporter: tr}
			fake := newClock()
			// How the lease of worker-a is made to expire.
			expire := func(l engine.Lease) { fake.Advance(2 * time.Minute) }
			// The last renewal before the takeover is short on the
			// database's clock, which the test can only wait out.
			ttl, short := time.Minute, time.Minute
			now := time.Now
			if clock == "store clock" {
				opts.Now, now = fake.Now, fake.Now
			} else {
				short = 50 * time.Millisecond
				expire = func(l engine.Lease) { time.Sleep(time.Until(l.ExpiresAt) + 100*time.Millisecond) }
			}
			s := openStore(t, srv.DSN("dvt", "lease_trips"), opts)
			defer s.Close()
			f := storetest.NewFixture()
			f.Bootstrap(t, s)
			run := f.Meta.RunID
			var a engine.Lease
			steps := []struct {
				name     string
				before   func()
				owner    string
				ttl      time.Duration
				wantCode engine.Code
				fence    int64
			}{
				{name: "first acquire", owner: "worker-a", ttl: ttl, fence: 1},
				{name: "renewal keeps the fence", owner: "worker-a", ttl: ttl, fence: 1},
				{name: "held by another owner", owner: "worker-b", ttl: ttl, wantCode: engine.CodeLeaseHeld},
				{name: "a last renewal", owner: "worker-a", ttl: short, fence: 1},
				{name: "takeover after expiry grows the fence", before: func() { expire(a) }, owner: "worker-b", ttl: time.Minute, fence: 2},
				{name: "the old owner is refused", owner: "worker-a", ttl: ttl, wantCode: engine.CodeLeaseHeld},
			}
			for _, st := range steps {
				if st.before != nil {
					st.before()
				}
				tr.Reset()
				before := now()
				l, err := s.AcquireFencedLease(ctx, run, st.owner, st.ttl)
				after := now()
				if engine.CodeOf(err) != st.wantCode {
					t.Fatalf("%s: error %v, want code %q", st.name, err, st.wantCode)
				}
				tripsAfterLogin(t, st.name, tr, 1)
				if err != nil {
					continue
				}
				if l.Owner != st.owner || l.Fence != st.fence {
					t.Fatalf("%s: lease %+v, want owner %s fence %d", st.name, l, st.owner, st.fence)
				}
				// Expiry is the deciding clock's now (read inside the call)
				// plus the TTL; the database's clock is a microsecond one.
				if lo, hi := before.Add(st.ttl-time.Microsecond), after.Add(st.ttl+time.Microsecond); l.ExpiresAt.Before(lo) || l.ExpiresAt.After(hi) {
					t.Fatalf("%s: lease expires at %s, want between %s and %s", st.name, l.ExpiresAt, lo, hi)
				}
				if st.owner == "worker-a" {
					a = l
				}
			}
		})
	}
}

// TestStartRunIsOneRequest: engine.StartRun bootstraps without a separate
// reservation, and RunQueued's eventId is bound in the registry.
func TestStartRunIsOneRequest(t *testing.T) {
	srv := sftest.Start(t)
	tr := &sftest.CountingTransport{}
	s := openStore(t, srv.DSN("dvt", "start_trips"), snowflake.Options{Transporter: tr})
	defer s.Close()
	startPlan, err := plan.Parse([]byte("planId: start\nplanVersion: \"1\"\nsteps:\n  - {id: model.a, kind: model, sql: select 1}\n"), "start.yaml")
	if err != nil {
		t.Fatal(err)
	}
	eng := &engine.Engine{Log: s, Clock: engine.ClockFunc(time.Now), IDs: engine.IDFunc(uuid.NewString),
		Config: engine.Config{TenantID: "acme", ProjectID: "shop", EnvironmentID: "dev"}}
	tr.Reset()
	runID, err := eng.StartRun(ctx, engine.StartRequest{Plan: startPlan})
	if err != nil {
		t.Fatal(err)
	}
	tripsAfterLogin(t, "StartRun", tr, 1)
	recs, err := s.ListEvents(ctx, runID, 0, 0)
	if err != nil || len(recs) != 1 || recs[0].EventType != engine.RunQueued {
		t.Fatalf("log %+v %v, want RunQueued alone", recs, err)
	}
	ids, err := s.ReserveEventIDs(ctx, runID, map[string]string{recs[0].IdempotencyKey: uuid.NewString()})
	if err != nil || ids[recs[0].IdempotencyKey] != recs[0].EventID {
		t.Fatalf("registry answers %v (%v), want RunQueued's eventId %s", ids, err, recs[0].EventID)
	}
}

// TestLostAnswerOnTheStartPath: a bootstrap or a lease acquire whose block
// committed but whose answer was lost is retried by the store. The
// bootstrap answers RUN_ALREADY_EXISTS (it is not idempotent; resume
// continues a run) or the same ids, leaving RunQueued once, bound to one
// eventId; the acquire comes back as the owner's renewal, with the fence of
// the commit it never heard of.
func TestLostAnswerOnTheStartPath(t *testing.T) {
	cases := []struct {
		name      string
		bootstrap bool // the run exists before the call whose answer is lost
		call      func(s *snowflake.Store, f *storetest.Fixture) (any, error)
		check     func(t *testing.T, s *snowflake.Store, f *storetest.Fixture, res any, err error)
	}{
		{
			name: "bootstrap",
			call: func(s *snowflake.Store, f *storetest.Fixture) (any, error) {
				return s.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{f.Event(engine.RunQueued, "", 1)})
			},
			check: func(t *testing.T, s *snowflake.Store, f *storetest.Fixture, res any, err error) {
				recs, lerr := s.ListEvents(ctx, f.Meta.RunID, 0, 0)
				if lerr != nil || len(recs) != 1 || recs[0].EventType != engine.RunQueued {
					t.Fatalf("log %+v %v, want RunQueued once", recs, lerr)
				}
				switch engine.CodeOf(err) {
				case engine.CodeRunAlreadyExists:
				case "":
					if r := res.(engine.AppendResult); len(r.Appended) != 1 || r.Appended[0].EventID != recs[0].EventID {
						t.Fatalf("bootstrap answered %+v, want RunQueued with eventId %s", r, recs[0].EventID)
					}
				default:
					t.Fatalf("bootstrap after a lost answer: %v, want success or RUN_ALREADY_EXISTS", err)
				}
				if n, err := s.CountOutbox(ctx, f.Meta.RunID); err != nil || n != 1 {
					t.Fatalf("outbox %d rows (%v), want 1", n, err)
				}
				key := recs[0].IdempotencyKey
				if ids, err := s.ReserveEventIDs(ctx, f.Meta.RunID, map[string]string{key: uuid.NewString()}); err != nil || ids[key] != recs[0].EventID {
					t.Fatalf("registry answers %v (%v), want %s", ids, err, recs[0].EventID)
				}
			},
		},
		{
			name: "lease acquire", bootstrap: true,
			call: func(s *snowflake.Store, f *storetest.Fixture) (any, error) {
				return s.AcquireFencedLease(ctx, f.Meta.RunID, "worker-a", time.Minute)
			},
			check: func(t *testing.T, s *snowflake.Store, f *storetest.Fixture, res any, err error) {
				if l := res.(engine.Lease); err != nil || l.Owner != "worker-a" || l.Fence != 1 {
					t.Fatalf("acquire after a lost answer: %+v %v, want worker-a with fence 1", l, err)
				}
				if _, err := s.AcquireFencedLease(ctx, f.Meta.RunID, "worker-b", time.Minute); engine.CodeOf(err) != engine.CodeLeaseHeld {
					t.Fatalf("another owner: %v, want LEASE_HELD", err)
				}
			},
		},
	}
	srv := sftest.Start(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := &lossyTransport{}
			s := openStore(t, srv.DSN("dvt", "lost_start"), snowflake.Options{Transporter: tr, RetryBase: time.Millisecond})
			defer s.Close()
			f := storetest.NewFixture()
			if c.bootstrap {
				f.Bootstrap(t, s)
			}
			tr.armed.Store(1)
			res, err := c.call(s, f)
			if tr.armed.Load() > 0 {
				t.Fatal("no answer was lost: the test did not exercise the retry")
			}
			c.check(t, s, f, res, err)
		})
	}
}

// TestSessionsAreKept: a process whose runs use the store four at a time,
// again and again, logs in four times, not once per burst: the sessions
// stay open between bursts (database/sql keeps two by default).
func TestSessionsAreKept(t *testing.T) {
	srv := sftest.Start(t)
	tr := &sftest.CountingTransport{}
	s := openStore(t, srv.DSN("dvt", fmt.Sprintf("sessions_%d", freshSchemas.Add(1))), snowflake.Options{Transporter: tr})
	defer s.Close()
	f := storetest.NewFixture()
	f.Bootstrap(t, s)
	const parallel, bursts = 4, 10
	for range bursts {
		var wg sync.WaitGroup
		for range parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.ListEvents(ctx, f.Meta.RunID, 0, 0); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	if n := tr.Count(sftest.TripLogin); n > parallel {
		t.Errorf("%d logins for %d bursts of %d concurrent reads, want at most %d", n, bursts, parallel, parallel)
	}
}

// TestGetRunAfterBootstrapIsFree: the Store that bootstrapped a run
// answers its metadata without a request, exactly as the database holds
// it (another Store reads it there), provider reference included, until
// the run ends.
func TestGetRunAfterBootstrapIsFree(t *testing.T) {
	srv := sftest.Start(t)
	dsn := srv.DSN("dvt", fmt.Sprintf("getrun_%d", freshSchemas.Add(1)))
	tr := &sftest.CountingTransport{}
	s := openStore(t, dsn, snowflake.Options{Transporter: tr})
	defer s.Close()
	other := openStore(t, dsn, snowflake.Options{})
	defer other.Close()
	f := storetest.NewFixture()
	if _, err := s.BootstrapRun(ctx, f.Meta, []engine.RunEventWrite{f.Event(engine.RunQueued, "", 1)}); err != nil {
		t.Fatal(err)
	}
	same := func(when string, wantTrips int64) {
		t.Helper()
		before := tr.Count()
		got, err := s.GetRun(ctx, f.Meta.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if n := tr.Count() - before; n != wantTrips {
			t.Errorf("%s: GetRun cost %d requests, want %d", when, n, wantTrips)
		}
		stored, err := other.GetRun(ctx, f.Meta.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if got != stored {
			t.Errorf("%s: GetRun answered %+v, the database holds %+v", when, got, stored)
		}
	}
	same("after bootstrap", 0)
	if err := s.SetProviderRunRef(ctx, f.Meta.RunID, "local://me/"+f.Meta.RunID); err != nil {
		t.Fatal(err)
	}
	same("after SetProviderRunRef", 0)
	if _, err := s.AppendAndEnqueue(ctx, f.Meta.RunID, []engine.RunEventWrite{f.Event(engine.RunStarted, "", 1), f.Event(engine.RunCompleted, "", 1)}); err != nil {
		t.Fatal(err)
	}
	same("after the run ended", 1)
}

// TestSendSignalIsOneRequest: a signal is one request (send_signal_block),
// new or resent, so no transaction holds the run's lock between requests
// of a `dvtrun signal` that may die between them (issue 16).
func TestSendSignalIsOneRequest(t *testing.T) {
	srv := sftest.Start(t)
	tr := &sftest.CountingTransport{}
	s := openStore(t, srv.DSN("dvt", "signal_trips"), snowflake.Options{Transporter: tr})
	defer s.Close()
	f := storetest.NewFixture()
	f.Bootstrap(t, s)
	sig := engine.Signal{SignalID: uuid.NewString(), RunID: f.Meta.RunID, Type: engine.SignalPause, Reason: "it's late"}
	for _, what := range []string{"a new signal", "the same signal again"} {
		tr.Reset()
		got, err := s.SendSignal(ctx, sig)
		if err != nil || got.Seq != 1 || got.Reason != sig.Reason || got.SignalID != sig.SignalID {
			t.Fatalf("%s: %+v, %v", what, got, err)
		}
		tripsAfterLogin(t, what, tr, 1)
	}
}
