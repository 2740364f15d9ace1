package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sync"
)

// Emission is one event to emit.
type Emission struct {
	Type          EventType
	Step          string
	Attempt       int // logicalAttemptId
	Payload       any
	EngineAttempt int // engineAttemptId; 0 means 1
}

// EventAppender is what an Emitter needs of the state store; store.Store
// satisfies it.
type EventAppender interface {
	ReserveEventIDs(ctx context.Context, runID string, candidates map[string]string) (map[string]string, error)
	AppendAndEnqueue(ctx context.Context, runID string, events []RunEventWrite) (AppendResult, error)
}

// FencedAppender is what an Emitter with a lease (SetLease) needs of the
// state store; store.Store satisfies it.
type FencedAppender interface {
	AppendFenced(ctx context.Context, lease Lease, events []RunEventWrite) (AppendResult, error)
}

// Emitter writes a run's events: it fills the envelope, derives the
// idempotency key, takes eventIds from the EventIdRegistry (reserved in the
// store before the append, adopted from the store when it already holds the
// key), and refuses to emit a transition its own view of the run does not
// allow (Layer 1 of RunEvents §5.3).
//
// StartRun and the runner both emit through it.
type Emitter struct {
	log   EventAppender
	clock Clock
	idSrc IDSource
	meta  RunMetadata

	mu    sync.Mutex // the view (run, steps) and the hooks
	run   RunStatus
	steps map[string]StepState

	idMu sync.Mutex        // ids: Append runs while Prepare checks the next batch
	ids  map[string]string // idempotencyKey -> eventId

	onClose CloseHook
	lease   *Lease // set: appends are fenced (refused with LEASE_LOST once the lease passed on)
}

// CloseHook is called with a batch that ends the run (RunCompleted,
// RunFailed or RunCancelled), built but not yet appended; the artifact
// references it returns go into the closing event's payload as
// "artifacts" (the store keeps references, never bytes: ExecutionSemantics
// §2). A hook that cannot write its artifact returns none: the run's end is
// recorded all the same.
type CloseHook func(ctx context.Context, pending []RunEventWrite) []ArtifactRef

// OnClose sets the hook called before the run's closing event is appended.
func (em *Emitter) OnClose(h CloseHook) {
	em.mu.Lock()
	defer em.mu.Unlock()
	em.onClose = h
}

// SetLease makes every later append a fenced one (FencedAppender) by the
// holder of l.
func (em *Emitter) SetLease(l Lease) {
	em.mu.Lock()
	defer em.mu.Unlock()
	em.lease = &l
}

// NewEmitter returns an Emitter for the run meta describes, whose view of
// the run starts empty (see SetRunStatus and SetStepState).
func NewEmitter(log EventAppender, clock Clock, ids IDSource, meta RunMetadata) *Emitter {
	return &Emitter{log: log, clock: clock, idSrc: ids, meta: meta, ids: map[string]string{}, run: StatusNone, steps: map[string]StepState{}}
}

// SetRunStatus sets the emitter's view of the run's status, as read from
// its log, for the Layer 1 check.
func (em *Emitter) SetRunStatus(s RunStatus) {
	em.mu.Lock()
	defer em.mu.Unlock()
	em.run = s
}

// SetStepState sets the emitter's view of one step, as read from the log.
func (em *Emitter) SetStepState(stepID string, st StepState) {
	em.mu.Lock()
	defer em.mu.Unlock()
	em.steps[stepID] = st
}

// build makes one event with its key; its eventId comes later, from the
// registry. engineAttempt is not part of the key (RunEvents §3.1): an
// engine-level retry re-emits under the same key.
func (em *Emitter) build(t EventType, step string, attempt, engineAttempt int, payload any) (RunEventWrite, error) {
	if engineAttempt < 1 {
		engineAttempt = 1
	}
	e := RunEventWrite{
		EventType: t, EmittedAt: em.clock.Now().UTC().Truncate(1e6), RunID: em.meta.RunID,
		TenantID: em.meta.TenantID, ProjectID: em.meta.ProjectID, EnvironmentID: em.meta.EnvironmentID,
		PlanID: em.meta.PlanID, PlanVersion: em.meta.PlanVersion, EngineAttemptID: engineAttempt,
		LogicalAttemptID: attempt, StepID: step, Payload: EncodePayload(payload),
	}
	key, err := KeyOf(e).IdempotencyKey()
	if err != nil {
		return RunEventWrite{}, err
	}
	e.IdempotencyKey = key
	return e, nil
}

// reserve makes sure every event's key has an eventId in the registry,
// reserving fresh UUIDs in the store for the keys it has not seen (the
// registry write happens before any append of those keys, §2.5.1).
func (em *Emitter) reserve(ctx context.Context, events []RunEventWrite) error {
	want := map[string]string{}
	em.idMu.Lock()
	for _, e := range events {
		if _, ok := em.ids[e.IdempotencyKey]; !ok {
			want[e.IdempotencyKey] = em.idSrc.NewID()
		}
	}
	em.idMu.Unlock()
	if len(want) == 0 {
		return nil
	}
	got, err := em.log.ReserveEventIDs(ctx, em.meta.RunID, want)
	if err != nil {
		return err
	}
	em.idMu.Lock()
	defer em.idMu.Unlock()
	for k, v := range got {
		em.ids[k] = v
	}
	return nil
}

// eventID is the registry's eventId for key ("" before it is reserved).
func (em *Emitter) eventID(key string) string {
	em.idMu.Lock()
	defer em.idMu.Unlock()
	return em.ids[key]
}

// WithEventIDs returns a copy of events, built by Prepare, carrying
// eventIds, for a local spool: the registry's where it has the key, else a
// fresh candidate (the store may be unreachable, so nothing is reserved).
// Append takes ids from the registry whatever the events carry, so a
// candidate never reaches the log in place of a reserved id.
func (em *Emitter) WithEventIDs(events []RunEventWrite) []RunEventWrite {
	out := slices.Clone(events)
	em.idMu.Lock()
	defer em.idMu.Unlock()
	for i := range out {
		if id, ok := em.ids[out[i].IdempotencyKey]; ok {
			out[i].EventID = id
		} else if out[i].EventID == "" {
			out[i].EventID = em.idSrc.NewID()
		}
	}
	return out
}

// ReserveKeys reserves eventIds for events that may be emitted later, in
// one store call: a run reserves its steps' first-attempt events up front
// so that emitting costs one append each.
func (em *Emitter) ReserveKeys(ctx context.Context, ems []Emission) error {
	events := make([]RunEventWrite, 0, len(ems))
	for _, x := range ems {
		e, err := em.build(x.Type, x.Step, x.Attempt, x.EngineAttempt, nil)
		if err != nil {
			return err
		}
		events = append(events, e)
	}
	return em.reserve(ctx, events)
}

// Emit appends events as one batch, after checking them against the
// emitter's view of the run, which moves on only once the batch is stored:
// a failed Emit may be retried. The records come back in order.
func (em *Emitter) Emit(ctx context.Context, ems ...Emission) ([]RunEventRecord, error) {
	em.mu.Lock()
	defer em.mu.Unlock()
	events, run, steps, err := em.check(ems)
	if err != nil {
		return nil, err
	}
	recs, err := em.append(ctx, events, em.onClose, em.lease)
	if err != nil {
		return nil, err
	}
	em.advance(run, steps)
	return recs, nil
}

// Prepare builds the events of ems and checks them against the emitter's
// view of the run (Layer 1), which moves on at once: the caller appends
// them later with Append, in the order it prepared them (a group-commit
// writer), and stops the run if that fails.
func (em *Emitter) Prepare(ems ...Emission) ([]RunEventWrite, error) {
	em.mu.Lock()
	defer em.mu.Unlock()
	events, run, steps, err := em.check(ems)
	if err != nil {
		return nil, err
	}
	em.advance(run, steps)
	return events, nil
}

// check builds ems' events and the view they lead to.
func (em *Emitter) check(ems []Emission) ([]RunEventWrite, RunStatus, map[string]StepState, error) {
	events := make([]RunEventWrite, 0, len(ems))
	for _, x := range ems {
		e, err := em.build(x.Type, x.Step, x.Attempt, x.EngineAttempt, x.Payload)
		if err != nil {
			return nil, "", nil, err
		}
		events = append(events, e)
	}
	// Check against the states of the steps the batch touches only: copying
	// every step's state per batch would make a run quadratic.
	touched := make(map[string]StepState, len(events))
	for _, e := range events {
		if st, ok := em.steps[e.StepID]; ok && e.StepID != "" {
			touched[e.StepID] = st
		}
	}
	run, steps, err := CheckTransitions(em.run, touched, events)
	if err != nil {
		// Layer 1: never emit what the transition table forbids.
		ee := err.(*Error)
		ee.Msg = "runner refused to emit: " + ee.Msg
		ee.Meta["invalidTransitionDetected"] = true
		return nil, "", nil, ee
	}
	return events, run, steps, nil
}

func (em *Emitter) advance(run RunStatus, steps map[string]StepState) {
	em.run = run
	for id, st := range steps {
		em.steps[id] = st
	}
}

// Append stores events built by Prepare (or read back from a spool) as one
// batch: it runs the close hook when the batch ends the run, takes the
// events' eventIds from the registry (reserving the keys it has not seen),
// and appends, fenced when the emitter has a lease. Appending the same
// events again is safe: the store answers their stored records. Append
// does not touch the view, so Prepare may check the next batch meanwhile;
// one goroutine at a time appends.
func (em *Emitter) Append(ctx context.Context, events []RunEventWrite) ([]RunEventRecord, error) {
	em.mu.Lock()
	hook, lease := em.onClose, em.lease
	em.mu.Unlock()
	return em.append(ctx, events, hook, lease)
}

func (em *Emitter) append(ctx context.Context, events []RunEventWrite, hook CloseHook, lease *Lease) ([]RunEventRecord, error) {
	events = slices.Clone(events) // the close hook and the ids change them
	if hook != nil {
		if err := attachArtifacts(ctx, hook, events); err != nil {
			return nil, err
		}
	}
	if err := em.reserve(ctx, events); err != nil {
		return nil, err
	}
	for i := range events {
		events[i].EventID = em.eventID(events[i].IdempotencyKey)
	}
	var res AppendResult
	var err error
	if lease != nil {
		fa, ok := em.log.(FencedAppender)
		if !ok {
			return nil, Errorf(CodeInvalidArgument, "run %s: the state store cannot check a lease's fence", em.meta.RunID)
		}
		res, err = fa.AppendFenced(ctx, *lease, events)
	} else {
		res, err = em.log.AppendAndEnqueue(ctx, em.meta.RunID, events)
	}
	if err != nil {
		return nil, err
	}
	em.idMu.Lock()
	for _, r := range res.Deduped {
		em.ids[r.IdempotencyKey] = r.EventID // the store's record is authoritative
	}
	em.idMu.Unlock()
	return res.Records(), nil
}

// attachArtifacts runs the close hook when events end the run and adds
// what it returns to the closing event's payload.
func attachArtifacts(ctx context.Context, hook CloseHook, events []RunEventWrite) error {
	at := slices.IndexFunc(events, func(e RunEventWrite) bool {
		return e.EventType == RunCompleted || e.EventType == RunFailed || e.EventType == RunCancelled
	})
	if at < 0 {
		return nil
	}
	refs := hook(ctx, events)
	if len(refs) == 0 {
		return nil
	}
	payload := map[string]any{}
	if len(events[at].Payload) > 0 {
		dec := json.NewDecoder(bytes.NewReader(events[at].Payload))
		dec.UseNumber() // keep integers as written
		if err := dec.Decode(&payload); err != nil {
			return err
		}
	}
	payload["artifacts"] = refs
	b, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	events[at].Payload = b
	return nil
}
