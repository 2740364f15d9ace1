// Package dag holds the scheduling rules of a run's steps as pure state:
// which steps are ready given their statuses, skip propagation, fail-fast,
// RETRY_STEP and the run's pause state. It does no I/O, starts no goroutine
// and reads no clock, so the local runner and a Temporal workflow (whose
// code must be deterministic) share it.
package dag

import (
	"container/heap"
	"fmt"
	"slices"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// State is a run's steps and their statuses. Steps are indexed by their
// position in the plan.
type State struct {
	Steps      []plan.Step
	pos        map[string]int
	order      []int // plan's topological order, as indices
	deps       [][]int
	dependents [][]int
	status     []engine.StepStatus
	logical    []int
	waiting    []int // dependencies not SUCCESS yet
	counts     map[engine.StepStatus]int
	ready      intHeap      // PENDING steps whose dependencies all succeeded
	retry      map[int]bool // FAILED steps a RETRY_STEP asked to start again

	// FailFast, once set, is the step whose failure stopped scheduling.
	FailFast string
	// Run is the run's status as the scheduler knows it.
	Run engine.RunStatus
}

// New is the state of p's steps, all PENDING at logical attempt 1. Call
// Set for the statuses a log shows, then Seed.
func New(p *plan.Plan) *State {
	n := len(p.Steps)
	s := &State{Steps: p.Steps, pos: make(map[string]int, n), deps: make([][]int, n), dependents: make([][]int, n),
		status: make([]engine.StepStatus, n), logical: make([]int, n), waiting: make([]int, n),
		counts: map[engine.StepStatus]int{}, retry: map[int]bool{}}
	for i, st := range s.Steps {
		s.pos[st.ID] = i
	}
	for i, st := range s.Steps {
		for _, d := range st.DependsOn {
			j := s.pos[d]
			s.deps[i] = append(s.deps[i], j)
			s.dependents[j] = append(s.dependents[j], i)
		}
	}
	for _, st := range p.Order() {
		s.order = append(s.order, s.pos[st.ID])
	}
	for i := range s.Steps {
		s.status[i] = engine.StepStatusPending
		s.logical[i] = 1
	}
	s.counts[engine.StepStatusPending] = n
	return s
}

// Len is the number of steps.
func (s *State) Len() int { return len(s.Steps) }

// Index is the index of the step with id.
func (s *State) Index(id string) (int, bool) {
	i, ok := s.pos[id]
	return i, ok
}

// Status is step i's status.
func (s *State) Status(i int) engine.StepStatus { return s.status[i] }

// Logical is step i's logical attempt.
func (s *State) Logical(i int) int { return s.logical[i] }

// SetLogical sets step i's logical attempt (from a log).
func (s *State) SetLogical(i, attempt int) { s.logical[i] = attempt }

// Count is how many steps have status st.
func (s *State) Count(st engine.StepStatus) int { return s.counts[st] }

// Set sets step i's status.
func (s *State) Set(i int, st engine.StepStatus) {
	s.counts[s.status[i]]--
	s.status[i] = st
	s.counts[st]++
}

// Seed derives what is ready from the statuses set so far; it is called
// once, after the statuses a log shows are Set.
func (s *State) Seed() {
	for i := range s.Steps {
		for _, j := range s.deps[i] {
			if s.status[j] != engine.StepStatusSuccess {
				s.waiting[i]++
			}
		}
		if s.status[i] == engine.StepStatusPending && s.waiting[i] == 0 {
			heap.Push(&s.ready, i)
		}
	}
}

// Terminal counts the steps that are SUCCESS, FAILED or SKIPPED.
func (s *State) Terminal() int {
	return s.counts[engine.StepStatusSuccess] + s.counts[engine.StepStatusFailed] + s.counts[engine.StepStatusSkipped]
}

// Skip is a step to skip and why.
type Skip struct {
	I      int
	Reason string
}

// Pick takes up to n steps that may start now — PENDING steps whose
// dependencies succeeded and RETRY_STEP steps, in plan order — while the
// run is RUNNING and fail-fast has not tripped. The caller starts them
// (Set RUNNING once their StepStarted is recorded).
func (s *State) Pick(n int) []int {
	if s.Run != engine.StatusRunning || s.FailFast != "" {
		return nil
	}
	var starts []int
	for len(starts) < n && s.ready.Len() > 0 {
		i := heap.Pop(&s.ready).(int)
		if s.status[i] == engine.StepStatusPending || s.retry[i] {
			starts = append(starts, i)
		}
	}
	for _, i := range starts {
		delete(s.retry, i)
	}
	return starts
}

// Succeeded marks step i SUCCESS and readies the dependents it unblocks.
func (s *State) Succeeded(i int) {
	s.Set(i, engine.StepStatusSuccess)
	for _, d := range s.dependents[i] {
		s.waiting[d]--
		if s.waiting[d] == 0 && s.status[d] == engine.StepStatusPending {
			heap.Push(&s.ready, d)
		}
	}
}

// Failed marks step i FAILED and returns the steps to skip because of it,
// already marked SKIPPED: its PENDING transitive dependents and, when
// failFast trips now, every other PENDING step.
func (s *State) Failed(i int, failFast bool) []Skip {
	s.Set(i, engine.StepStatusFailed)
	var skips []Skip
	reason := fmt.Sprintf("upstream step %s failed", s.Steps[i].ID)
	stack := slices.Clone(s.dependents[i])
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s.status[d] != engine.StepStatusPending {
			continue
		}
		s.Set(d, engine.StepStatusSkipped)
		skips = append(skips, Skip{I: d, Reason: reason})
		stack = append(stack, s.dependents[d]...)
	}
	if failFast && s.FailFast == "" {
		s.FailFast = s.Steps[i].ID
		skips = append(skips, s.SkipPending(fmt.Sprintf("fail-fast: step %s failed, so no new work started", s.Steps[i].ID))...)
		clear(s.retry)
	}
	return skips
}

// SkipPending marks every PENDING step SKIPPED with reason.
func (s *State) SkipPending(reason string) []Skip {
	var skips []Skip
	for j := range s.Steps {
		if s.status[j] == engine.StepStatusPending {
			s.Set(j, engine.StepStatusSkipped)
			skips = append(skips, Skip{I: j, Reason: reason})
		}
	}
	return skips
}

// Blocked marks SKIPPED, in plan order, the PENDING steps whose upstream
// FAILED or was SKIPPED — normally done with the failure; this catches a
// log written by another runner.
func (s *State) Blocked() []Skip {
	if s.Run != engine.StatusRunning && s.Run != engine.StatusPaused {
		return nil
	}
	var skips []Skip
	for _, i := range s.order {
		if s.status[i] != engine.StepStatusPending {
			continue
		}
		for _, j := range s.deps[i] {
			if s.status[j] == engine.StepStatusFailed || s.status[j] == engine.StepStatusSkipped {
				s.Set(i, engine.StepStatusSkipped)
				skips = append(skips, Skip{I: i, Reason: fmt.Sprintf("upstream step %s is %s", s.Steps[j].ID, s.status[j])})
				break
			}
		}
	}
	return skips
}

// QueueRetry makes FAILED step i start again at logical attempt attempt.
func (s *State) QueueRetry(i, attempt int) {
	s.logical[i] = attempt
	s.retry[i] = true
	heap.Push(&s.ready, i)
}

// Retrying reports whether step i waits to be retried.
func (s *State) Retrying(i int) bool { return s.retry[i] }

// RetriesPending counts the steps waiting to be retried.
func (s *State) RetriesPending() int { return len(s.retry) }

// ClearRetries forgets the steps waiting to be retried (a cancelled run).
func (s *State) ClearRetries() { clear(s.retry) }

// Final returns the run's closing event when every step is terminal and
// the run is RUNNING (a PAUSED run waits for RESUME); busy says steps are
// still in flight, so the run cannot close yet.
func (s *State) Final(busy bool) (engine.Emission, bool) {
	if s.Run != engine.StatusRunning || busy || len(s.retry) > 0 || s.Terminal() < len(s.Steps) {
		return engine.Emission{}, false
	}
	if s.counts[engine.StepStatusSuccess] == len(s.Steps) {
		return engine.Emission{Type: engine.RunCompleted, Attempt: 1, Payload: map[string]any{"steps": len(s.Steps)}}, true
	}
	var failed, skipped []string
	for i, st := range s.status {
		switch st {
		case engine.StepStatusFailed:
			failed = append(failed, s.Steps[i].ID)
		case engine.StepStatusSkipped:
			skipped = append(skipped, s.Steps[i].ID)
		}
	}
	msg := fmt.Sprintf("%d step(s) failed: %s", len(failed), engine.JoinLimited(failed, ", ", 10))
	if len(failed) == 0 {
		msg = fmt.Sprintf("no step is FAILED now, but %d step(s) were skipped after a failure: %s", len(skipped), engine.JoinLimited(skipped, ", ", 10))
	}
	return engine.Emission{Type: engine.RunFailed, Attempt: 1, Payload: map[string]any{
		"error":       engine.ErrorInfo{Code: string(engine.CodeStepFailed), Message: msg},
		"failedSteps": failed, "skippedSteps": len(skipped),
	}}, true
}

// Refuse says why signal sg cannot apply to the run now ("" when it can):
// the contract's preconditions for each signal type. runID and planID
// name the run and plan in the reason.
func (s *State) Refuse(sg engine.Signal, runID, planID string) string {
	switch sg.Type {
	case engine.SignalPause:
		if s.Run != engine.StatusRunning {
			return fmt.Sprintf("PAUSE needs a RUNNING run; run %s is %s", runID, s.Run)
		}
	case engine.SignalResume:
		if s.Run != engine.StatusPaused {
			return fmt.Sprintf("RESUME needs a PAUSED run; run %s is %s", runID, s.Run)
		}
	case engine.SignalCancel:
		if s.Run != engine.StatusRunning && s.Run != engine.StatusPaused {
			return fmt.Sprintf("CANCEL needs a RUNNING or PAUSED run; run %s is %s", runID, s.Run)
		}
	case engine.SignalRetryStep:
		i, ok := s.pos[sg.StepID]
		switch {
		case !ok:
			return fmt.Sprintf("RETRY_STEP names step %q, which plan %s does not have (or the run did not select)", sg.StepID, planID)
		case s.Run != engine.StatusRunning:
			return fmt.Sprintf("RETRY_STEP needs a RUNNING run; run %s is %s", runID, s.Run)
		case s.FailFast != "":
			return fmt.Sprintf("fail-fast stopped scheduling after step %s failed", s.FailFast)
		case s.status[i] != engine.StepStatusFailed:
			return fmt.Sprintf("RETRY_STEP needs a FAILED step; step %s is %s", sg.StepID, s.status[i])
		case s.retry[i]:
			return fmt.Sprintf("step %s is already waiting to be retried", sg.StepID)
		}
	default:
		return fmt.Sprintf("unknown signal type %q", sg.Type)
	}
	return ""
}

// intHeap orders ready steps by plan position, so runs are deterministic.
type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
