// Package engine is dvtrun's contract with its stores and adapters, after
// RunEvents v2.0.1 and ExecutionSemantics v1.1: the event envelope and its
// validation, idempotency keys and event ids, the run and step transition
// tables with the append-time check (CheckTransitions), the Go reducer that
// projects a log to snapshots, the Emitter that producers append through,
// the error codes, and the four verbs of a run (StartRun, CancelRun,
// GetRunStatus, Signal). Clock, IDs, configuration, store and warehouse
// are injected: engine code reads no clock or environment of its own.
package engine
