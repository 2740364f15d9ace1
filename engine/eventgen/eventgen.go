// Package eventgen generates reproducible event streams for property tests:
// the Go reducer against itself (Incremental vs Project) and against the SQL
// projections. A stream is a plausible run — queued, started, steps started,
// completed, failed, retried, skipped, paused, resumed, cancelled — salted
// with re-delivered events, unknown event types, signal decisions, invalid
// transitions and runSeq gaps. Every event has a valid envelope (UUID v4 ids,
// §3.1 idempotency keys, UTC times) so streams can also go through a store.
package eventgen

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// Options shapes a stream. Zero values pick the defaults noted.
type Options struct {
	MaxSteps   int       // steps per run, 1..MaxSteps (default 6)
	MaxEvents  int       // stop after about this many events (default 60)
	Noise      float64   // probability of a noise event per tick (default 0.15)
	Start      time.Time // emittedAt of the first event (default 2026-01-01 UTC)
	TenantID   string    // default "t1"
	PlanID     string    // default "plan_gen"
	AllowGaps  bool      // leave occasional runSeq gaps
	Duplicates bool      // re-deliver earlier events (same key, new runSeq)
	// Odd adds events no store would accept but a log may still hold (raw
	// loads, Snowflake without enforced constraints, older versions):
	// logical attempts outside 1..64, run-level events with a stepId,
	// step-level ones without, malformed or mistyped payload fields,
	// emittedAt going backwards, events without tenancy. Such streams are
	// for projections only: they do not pass engine.Validate.
	Odd bool
}

// rng is splitmix64: tiny, deterministic, and free of global state.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *rng) intn(n int) int        { return int(r.next() % uint64(n)) }
func (r *rng) chance(p float64) bool { return float64(r.next()>>11)/(1<<53) < p }

func (r *rng) uuid() string {
	a, b := r.next(), r.next()
	a = a&^(0xf<<12) | 0x4<<12 // version 4
	b = b&^(0x3<<62) | 0x2<<62 // RFC 4122 variant
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", a>>32, (a>>16)&0xffff, a&0xffff, b>>48, b&0xffffffffffff)
}

type gen struct {
	r      rng
	o      Options
	runID  string
	now    time.Time
	seq    int64
	out    []engine.RunEventRecord
	status engine.RunStatus
	steps  []genStep
	pauses int
	sigs   int
	back   time.Duration // the next event's emittedAt lies this far in the past
}

type genStep struct {
	id      string
	status  engine.StepStatus
	attempt int
}

// Stream returns the events of one generated run, in runSeq order.
func Stream(seed uint64, runID string, o Options) []engine.RunEventRecord {
	if o.MaxSteps <= 0 {
		o.MaxSteps = 6
	}
	if o.MaxEvents <= 0 {
		o.MaxEvents = 60
	}
	if o.Noise == 0 {
		o.Noise = 0.15
	}
	if o.Start.IsZero() {
		o.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if o.TenantID == "" {
		o.TenantID = "t1"
	}
	if o.PlanID == "" {
		o.PlanID = "plan_gen"
	}
	g := &gen{r: rng{s: seed}, o: o, runID: runID, now: o.Start, status: engine.StatusNone}
	n := 1 + g.r.intn(o.MaxSteps)
	for i := range n {
		g.steps = append(g.steps, genStep{id: fmt.Sprintf("model.m%d", i), status: engine.StepStatusPending})
	}
	g.run()
	return g.out
}

func (g *gen) run() {
	g.emit(engine.RunQueued, "", 1, nil)
	switch {
	case g.r.chance(0.05):
		g.emit(engine.RunFailed, "", 1, errPayload("ADAPTER_START_FAILED", "adapter could not start"))
		return
	case g.r.chance(0.05):
		g.emit(engine.RunCancelled, "", 1, reason("cancelled while queued"))
		return
	case g.r.chance(0.1):
		g.emit(engine.RunApproved, "", 1, nil)
	}
	g.emit(engine.RunStarted, "", 1, nil)
	for len(g.out) < g.o.MaxEvents {
		if g.r.chance(g.o.Noise) {
			g.noise()
			continue
		}
		if g.status == engine.StatusPaused {
			switch {
			case g.r.chance(0.06):
				return // stop while paused, steps maybe still draining
			case g.r.chance(0.1):
				g.emit(engine.RunCancelled, "", 1, reason("operator cancel"))
				return
			case g.r.chance(0.5):
				g.emit(engine.RunResumed, "", g.pauses, nil)
			default:
				g.finishOne() // in-flight steps drain while paused
			}
			continue
		}
		if g.done() {
			break
		}
		switch k := g.r.intn(20); {
		case k < 8:
			g.startOne()
		case k < 15:
			g.finishOne()
		case k < 16:
			g.skipOne()
		case k < 17:
			g.retryOne()
		case k < 19:
			g.pauses++
			g.emit(engine.RunPaused, "", g.pauses, reason("operator pause"))
		default:
			if g.r.chance(0.3) {
				g.emit(engine.RunCancelled, "", 1, reason("operator cancel"))
				return
			}
		}
	}
	if g.status != engine.StatusRunning || g.r.chance(0.1) {
		return // stop mid-run: snapshots of in-flight runs must agree too
	}
	for _, st := range g.steps {
		if st.status == engine.StepStatusFailed || st.status == engine.StepStatusRunning || st.status == engine.StepStatusPending {
			g.emit(engine.RunFailed, "", 1, errPayload("STEP_FAILED", "a step did not succeed"))
			return
		}
	}
	g.emit(engine.RunCompleted, "", 1, nil)
}

func (g *gen) done() bool {
	for _, st := range g.steps {
		if st.status == engine.StepStatusPending || st.status == engine.StepStatusRunning {
			return false
		}
	}
	return true
}

func (g *gen) pick(status engine.StepStatus) int {
	var idx []int
	for i, st := range g.steps {
		if st.status == status {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return -1
	}
	return idx[g.r.intn(len(idx))]
}

func (g *gen) startOne() {
	if i := g.pick(engine.StepStatusPending); i >= 0 {
		g.emit(engine.StepStarted, g.steps[i].id, 1, nil)
	}
}

func (g *gen) finishOne() {
	i := g.pick(engine.StepStatusRunning)
	if i < 0 {
		return
	}
	st := g.steps[i]
	if g.r.chance(0.25) {
		g.emit(engine.StepFailed, st.id, st.attempt, errPayload("STEP_FAILED", "syntax error near \"selec\""))
		return
	}
	if g.r.chance(0.2) {
		// Run again after a resume: timed from this attempt's start.
		at := g.now.Add(-time.Duration(g.r.intn(1500))*time.Millisecond - time.Duration(g.r.intn(999_999)))
		b, _ := json.Marshal(map[string]any{"rowsAffected": 3, "attemptStartedAt": at.UTC().Format(engine.TimeFormat)})
		g.emit(engine.StepCompleted, st.id, st.attempt, b)
		return
	}
	g.emit(engine.StepCompleted, st.id, st.attempt, json.RawMessage(`{"rowsAffected":3,"artifacts":[{"uri":"file:///tmp/a.csv","kind":"csv","sizeBytes":12}]}`))
}

func (g *gen) skipOne() {
	if i := g.pick(engine.StepStatusPending); i >= 0 {
		g.emit(engine.StepSkipped, g.steps[i].id, 1, reason("upstream model.m0 failed"))
	}
}

func (g *gen) retryOne() {
	if i := g.pick(engine.StepStatusFailed); i >= 0 {
		g.emit(engine.StepStarted, g.steps[i].id, g.steps[i].attempt+1, nil)
	}
}

// noise emits an event a healthy producer would not: a re-delivery, an
// unknown type, a signal decision, or an invalid transition.
func (g *gen) noise() {
	kinds := 5
	if g.o.Odd {
		kinds = 7
	}
	switch g.r.intn(kinds) {
	case 5:
		g.odd()
	case 6:
		g.oddPayload()
	case 0:
		if g.o.Duplicates && len(g.out) > 0 {
			dup := g.out[g.r.intn(len(g.out))]
			g.seq++
			dup.RunSeq = g.seq
			g.tick()
			dup.PersistedAt = g.now.Add(time.Millisecond)
			g.out = append(g.out, dup)
		}
	case 1:
		step := ""
		if g.r.chance(0.5) {
			step = g.steps[g.r.intn(len(g.steps))].id
		}
		g.emit("StepDelayed", step, 1+g.r.intn(3), reason("throttled"))
	case 2:
		g.sigs++
		g.emit(engine.SignalAccepted, "", g.sigs, json.RawMessage(`{"signalType":"PAUSE"}`))
	default:
		g.invalid()
	}
}

// odd emits an event with an envelope the store would refuse.
func (g *gen) odd() {
	st := g.steps[g.r.intn(len(g.steps))]
	switch g.r.intn(7) {
	case 0: // attempts outside the reducer's 1..64 bitset: its overflow map
		attempts := []int{0, -1, 65, 70, 1000}
		a := attempts[g.r.intn(len(attempts))]
		types := []engine.EventType{engine.StepStarted, engine.StepCompleted, engine.StepFailed, engine.StepSkipped, engine.RunPaused, engine.RunResumed}
		t, step := types[g.r.intn(len(types))], ""
		if t.StepLevel() {
			step = st.id
		}
		g.emit(t, step, a, nil)
	case 1: // a run-level event naming a step
		types := []engine.EventType{engine.RunPaused, engine.RunResumed, engine.RunCancelled, engine.RunFailed}
		g.emit(types[g.r.intn(len(types))], st.id, 1+g.r.intn(3), errPayload("ODD", "run event with a step"))
	case 2: // a step-level event without a step: opaque
		g.emit(engine.StepStarted, "", st.attempt+1, nil)
	case 3: // a step event emitted in the past: a negative duration
		g.back = time.Duration(5+g.r.intn(30)) * time.Second
		if i := g.pick(engine.StepStatusRunning); i >= 0 {
			g.emit(engine.StepCompleted, g.steps[i].id, g.steps[i].attempt, nil)
		} else {
			g.emit(engine.StepStarted, st.id, st.attempt+1, nil)
		}
	case 4: // no tenancy on this event
		g.emit("StepHeartbeat", st.id, 1, nil)
		e := &g.out[len(g.out)-1]
		e.TenantID, e.ProjectID, e.EnvironmentID = "", "", ""
	case 5: // a step named for the first time by a completion
		g.emit(engine.StepCompleted, fmt.Sprintf("model.late%d", g.r.intn(3)), 1, nil)
	default: // a step event while the run is not running (yet)
		g.emit(engine.StepSkipped, st.id, 1, reason("skipped early"))
	}
}

// oddPayloads are payloads whose fields do not decode as the reducer
// expects, or barely do; the reducer treats a field that does not decode as
// absent.
var oddPayloads = []string{
	`{"error":{"code":42,"message":"numeric code"}}`,
	`{"error":null}`,
	`{"error":"just text"}`,
	`{"error":{}}`,
	`{"error":{"message":"no code","retryable":true}}`,
	`{"error":{"code":"E","retryable":"yes"}}`,
	`{"error":{"code":"TRUNC"`,
	`{"reason":5}`,
	`{"reason":null}`,
	`{"reason":"ünïcødé \"quoted\"\nnewline"}`,
	`{"artifacts":[]}`,
	`{"artifacts":null}`,
	`{"artifacts":[{"uri":1,"kind":"csv"}]}`,
	`{"artifacts":{"uri":"file:///x"}}`,
	`{"artifacts":[{"uri":"s3://b/k","kind":"parquet","sha256":"ab","sizeBytes":7,"expiresAt":"2027-01-01T00:00:00Z"},null]}`,
	`[1,2,3]`,
	`"text"`,
	`{"attemptStartedAt":"2026-02-30T00:00:00.000000000Z"}`,
	`{"attemptStartedAt":"2026-01-01T00:00:00Z"}`,
	`{"attemptStartedAt":1767225600000}`,
	`{"attemptStartedAt":null,"error":{"code":"E","message":"m"}}`,
	`{"attemptStartedAt":"2025-12-31T23:59:59.999999999Z","error":{"code":"E","message":"m"}}`,
}

// oddPayload emits a plausible next event with an odd payload.
func (g *gen) oddPayload() {
	p := json.RawMessage(oddPayloads[g.r.intn(len(oddPayloads))])
	if i := g.pick(engine.StepStatusRunning); i >= 0 {
		st := g.steps[i]
		if g.r.chance(0.5) {
			g.emit(engine.StepFailed, st.id, st.attempt, p)
		} else {
			g.emit(engine.StepCompleted, st.id, st.attempt, p)
		}
		return
	}
	if i := g.pick(engine.StepStatusPending); i >= 0 && g.status == engine.StatusRunning {
		g.emit(engine.StepSkipped, g.steps[i].id, 1, p)
		return
	}
	if g.status == engine.StatusRunning || g.status == engine.StatusQueued {
		g.emit(engine.RunFailed, "", 1, p)
	}
}

// invalid emits a known event with a fresh key that the transition table
// rejects in the current state (or, rarely, accepts: the reducer decides).
func (g *gen) invalid() {
	st := g.steps[g.r.intn(len(g.steps))]
	switch g.r.intn(7) {
	case 6: // the first event about a step the log never started (Policy A: no step appears)
		types := []engine.EventType{engine.StepCompleted, engine.StepFailed, engine.StepCompleted}
		g.emit(types[g.r.intn(len(types))], fmt.Sprintf("test.ghost%d", g.r.intn(2)), 1+g.r.intn(2), errPayload("GHOST", "never started"))
	case 0:
		g.emit(engine.StepCompleted, st.id, st.attempt+5, nil)
	case 1:
		g.emit(engine.StepFailed, st.id, st.attempt+5, errPayload("LATE", "late failure"))
	case 2:
		g.emit(engine.StepStarted, st.id, st.attempt+5, nil)
	case 3:
		g.pauses++
		g.emit(engine.RunResumed, "", g.pauses, nil)
	case 4:
		g.emit(engine.StepSkipped, st.id, st.attempt+5, reason("late skip"))
	default:
		g.emit(engine.RunQueued, "", 2, nil)
	}
}

func (g *gen) tick() {
	// Sub-millisecond offsets exercise the millisecond truncation rule.
	g.now = g.now.Add(time.Duration(1+g.r.intn(2500)) * time.Millisecond).Add(time.Duration(g.r.intn(999_999)))
}

func (g *gen) emit(t engine.EventType, stepID string, attempt int, payload json.RawMessage) {
	g.tick()
	g.seq++
	if g.o.AllowGaps && g.r.chance(0.05) {
		g.seq += int64(1 + g.r.intn(3))
	}
	emitted := g.now.Add(-g.back)
	g.back = 0
	e := engine.RunEventWrite{
		EventID:          g.r.uuid(),
		EventType:        t,
		EmittedAt:        emitted,
		RunID:            g.runID,
		TenantID:         g.o.TenantID,
		ProjectID:        "p1",
		EnvironmentID:    "dev",
		PlanID:           g.o.PlanID,
		PlanVersion:      "1",
		EngineAttemptID:  1 + g.r.intn(2),
		LogicalAttemptID: attempt,
		StepID:           stepID,
		Payload:          payload,
	}
	key, err := engine.KeyOf(e).IdempotencyKey()
	switch {
	case err != nil && g.o.Odd:
		key = "odd-" + e.EventID // a negative attempt has no §3.1 key
	case err != nil:
		panic(err) // generator bug: ids never contain '|'
	}
	e.IdempotencyKey = key
	rec := engine.RunEventRecord{RunEventWrite: e, RunSeq: g.seq, PersistedAt: g.now.Add(time.Duration(g.r.intn(5_000_000)))}
	g.out = append(g.out, rec)
	g.track(rec)
}

// track follows the generator's own notion of state with the real
// transition rules, so valid paths stay valid.
func (g *gen) track(e engine.RunEventRecord) {
	if e.EventType.StepLevel() {
		for i := range g.steps {
			st := &g.steps[i]
			if st.id != e.StepID {
				continue
			}
			if to, ok := engine.StepTransition(st.status, e.EventType, g.status, st.attempt, e.LogicalAttemptID); ok {
				st.status = to
				if e.EventType == engine.StepStarted || e.EventType == engine.StepSkipped {
					st.attempt = e.LogicalAttemptID
				}
			}
		}
		return
	}
	if to, ok := engine.RunTransition(g.status, e.EventType); ok {
		g.status = to
	}
}

func errPayload(code, msg string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": msg, "retryable": false}})
	return b
}

func reason(r string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"reason": r})
	return b
}
