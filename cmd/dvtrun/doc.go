// Command dvtrun runs dbt-style plans in a warehouse and records every
// lifecycle event in a state store (SQLite, Postgres or Snowflake). Its
// commands start, resume, retry, cancel, signal and inspect runs by hand
// (run, resume, retry, cancel, signal, status, events …), queue and
// schedule them and serve them (enqueue, scheduler, worker, serve, ui),
// deliver the event log to sinks (outbox), and audit or verify it. Each command parses its flags, opens the stores its
// configuration names and calls the engine packages; the local runner or
// the Temporal adapter executes the run.
package main
