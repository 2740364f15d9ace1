package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
)

// AuditDialect is what a backend gives AuditSQL: its statements (the same
// names in sql/<dialect>/audit.sql), its write transaction and how it binds
// a timestamp.
type AuditDialect struct {
	Queries map[string]string
	Read    Tx
	// Write runs fn in one write transaction that serialises the
	// checkpointers (SQLite: BEGIN IMMEDIATE; Postgres and Snowflake: a
	// lock) and classifies its errors.
	Write    func(ctx context.Context, fn func(tx Tx) error) error
	Classify func(op string, err error) error
	Time     func(time.Time) any
	// Snapshot begins a read-only transaction whose reads all see one
	// snapshot of the database, and returns what ends it; nil when the
	// backend has none (AuditSnapshot then returns no store).
	Snapshot func(ctx context.Context) (Tx, func(), error)
	// Events is ListEvents through q (the snapshot's transaction).
	Events func(ctx context.Context, q Tx, runID string, afterSeq int64, limit int) ([]engine.RunEventRecord, error)
}

// AuditSQL reads the hash chains and keeps the global log and its
// checkpoints, once for every SQL backend (engine/audit does the hashing).
type AuditSQL struct{ d AuditDialect }

// NewAuditSQL returns the audit log over a backend's dialect.
func NewAuditSQL(d AuditDialect) *AuditSQL { return &AuditSQL{d: d} }

// AuditSnapshot returns the reads of audit verification (audit.Store) in
// one read-only transaction that sees one snapshot, and what ends it; nil
// when the backend has no snapshot reads (audit.Snapshotter).
func (a *AuditSQL) AuditSnapshot(ctx context.Context) (audit.Store, func(), error) {
	if a.d.Snapshot == nil {
		return nil, nil, nil
	}
	tx, end, err := a.d.Snapshot(ctx)
	if err != nil {
		return nil, nil, a.d.Classify("audit snapshot", err)
	}
	d := a.d
	d.Read, d.Snapshot = tx, nil
	d.Write = func(context.Context, func(Tx) error) error {
		return engine.Errorf(engine.CodeInvalidArgument, "the audit snapshot is read-only")
	}
	return auditSnapshot{AuditSQL: &AuditSQL{d: d}}, end, nil
}

// auditSnapshot is audit.Store on a snapshot's transaction.
type auditSnapshot struct{ *AuditSQL }

func (s auditSnapshot) ListEvents(ctx context.Context, runID string, afterSeq int64, limit int) ([]engine.RunEventRecord, error) {
	return s.d.Events(ctx, s.d.Read, runID, afterSeq, limit)
}

// AuditRuns lists the runs with a sequence row: all, or the one given.
func (a *AuditSQL) AuditRuns(ctx context.Context, runID string) ([]audit.RunHead, error) {
	q, args := a.d.Queries["audit_runs"], []any(nil)
	if runID != "" {
		q, args = a.d.Queries["audit_run"], []any{runID}
	}
	rows, err := a.d.Read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, a.d.Classify("audit runs", err)
	}
	defer rows.Close()
	var out []audit.RunHead
	for rows.Next() {
		var r audit.RunHead
		var status string
		if err := rows.Scan(&r.RunID, &status, &r.NextSeq, &r.FirstSeq, &r.RetainedAt, &r.LastHash); err != nil {
			return nil, a.d.Classify("audit runs", err)
		}
		r.Status = engine.RunStatus(status)
		out = append(out, r)
	}
	return out, a.d.Classify("audit runs", rows.Err())
}

// Links returns a run's chain columns by runSeq (payload_sha256, and
// payload_text on Snowflake, with them).
func (a *AuditSQL) Links(ctx context.Context, runID string) (map[int64]audit.StoredLink, error) {
	rows, err := a.d.Read.QueryContext(ctx, a.d.Queries["audit_links"], runID)
	if err != nil {
		return nil, a.d.Classify("audit links", err)
	}
	defer rows.Close()
	out := map[int64]audit.StoredLink{}
	for rows.Next() {
		var seq int64
		var prev, hash, bytes, digest, text sql.NullString
		if err := rows.Scan(&seq, &prev, &hash, &bytes, &digest, &text); err != nil {
			return nil, a.d.Classify("audit links", err)
		}
		out[seq] = audit.StoredLink{PrevHash: prev.String, Hash: hash.String, EventBytes: []byte(bytes.String),
			PayloadSHA256: digest.String, PayloadText: text.String}
	}
	return out, a.d.Classify("audit links", rows.Err())
}

// AuditRunIDs returns the runs of dvt_run_events and of dvt_runs: all,
// or the one given.
func (a *AuditSQL) AuditRunIDs(ctx context.Context, runID string) (audit.RunIDs, error) {
	var out audit.RunIDs
	for _, l := range []struct {
		all, one string
		into     *[]string
	}{{"audit_event_runs", "audit_event_run", &out.Events}, {"audit_registered_runs", "audit_registered_run", &out.Runs}} {
		q, args := a.d.Queries[l.all], []any(nil)
		if runID != "" {
			q, args = a.d.Queries[l.one], []any{runID}
		}
		rows, err := a.d.Read.QueryContext(ctx, q, args...)
		if err != nil {
			return out, a.d.Classify("audit runs", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return out, a.d.Classify("audit runs", err)
			}
			*l.into = append(*l.into, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return out, a.d.Classify("audit runs", err)
		}
	}
	return out, nil
}

// AssignLogIndexes gives every chained event not yet in the global log
// the next log indexes, and returns how many it gave.
func (a *AuditSQL) AssignLogIndexes(ctx context.Context) (int64, error) {
	var n int64
	err := a.d.Write(ctx, func(tx Tx) error {
		res, err := tx.ExecContext(ctx, a.d.Queries["audit_assign"])
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// RecordRetention records for retention, in one write transaction, every
// ended run whose terminal event was persisted before cutoff and whose
// every event is chained and in the log below the newest checkpoint, and
// none holds a v1 payload: a record signed by sign, appended to the global
// log (run id audit.RetentionRunID, runSeq its ordinal) and stored in
// dvt_audit_retention. It returns how many runs it recorded and how many
// it skipped for their v1 payloads.
func (a *AuditSQL) RecordRetention(ctx context.Context, now, cutoff time.Time, olderThan time.Duration, sign func(audit.Retention) ([]byte, error)) (n, skippedV1 int64, err error) {
	text := func(t time.Time) string { return t.UTC().Format(engine.TimeFormat) }
	err = a.d.Write(ctx, func(tx Tx) error {
		if err := tx.QueryRowContext(ctx, a.d.Queries["audit_retain_v1"], a.d.Time(cutoff)).Scan(&skippedV1); err != nil {
			return err
		}
		var runs []string
		rows, err := tx.QueryContext(ctx, a.d.Queries["audit_retain_candidates"], a.d.Time(cutoff))
		if err != nil {
			return err
		}
		for rows.Next() {
			var r string
			if err := rows.Scan(&r); err != nil {
				rows.Close()
				return err
			}
			runs = append(runs, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(runs) == 0 {
			return err
		}
		var seq, index, covered int64
		if err := tx.QueryRowContext(ctx, a.d.Queries["audit_retain_next"]).Scan(&seq, &index, &covered); err != nil {
			return err
		}
		for _, run := range runs {
			seq++
			r := audit.Retention{Seq: seq, RunID: run, OlderThan: olderThan.String(), Cutoff: text(cutoff), RemovedAt: text(now), Covered: covered}
			note, err := sign(r)
			if err != nil {
				return err
			}
			// The log entry first: the insert guard of dvt_audit_retention
			// wants the record in the log.
			if _, err := tx.ExecContext(ctx, a.d.Queries["audit_retain_log"], index, seq, audit.RetentionLeaf(note)); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, a.d.Queries["audit_retain_insert"], r.RunID, r.RemovedAt, r.Cutoff, r.Seq, r.OlderThan, r.Covered, string(note)); err != nil {
				return err
			}
			index++
		}
		n = int64(len(runs))
		return nil
	})
	return n, skippedV1, err
}

// RemoveRetainedPayloads removes the payloads of the runs recorded for
// retention whose record a stored checkpoint covers (hashes and links
// stay), and returns how many runs and events lost theirs.
func (a *AuditSQL) RemoveRetainedPayloads(ctx context.Context) (runs, events int64, err error) {
	err = a.d.Write(ctx, func(tx Tx) error {
		if err := tx.QueryRowContext(ctx, a.d.Queries["audit_retain_runs"]).Scan(&runs); err != nil || runs == 0 {
			return err
		}
		res, err := tx.ExecContext(ctx, a.d.Queries["audit_retain_remove"])
		if err != nil {
			return err
		}
		events, err = res.RowsAffected()
		return err
	})
	return runs, events, err
}

// Retentions returns the rows of dvt_audit_retention with their signed
// records (none for a row made without one), by ordinal.
func (a *AuditSQL) Retentions(ctx context.Context) ([]audit.Retention, error) {
	rows, err := a.d.Read.QueryContext(ctx, a.d.Queries["audit_retentions"])
	if err != nil {
		return nil, a.d.Classify("audit retention", err)
	}
	defer rows.Close()
	var out []audit.Retention
	for rows.Next() {
		var r audit.Retention
		var note string
		if err := rows.Scan(&r.RunID, &r.Seq, &r.RemovedAt, &r.Cutoff, &r.OlderThan, &r.Covered, &note); err != nil {
			return nil, a.d.Classify("audit retention", err)
		}
		r.Note = []byte(note)
		out = append(out, r)
	}
	return out, a.d.Classify("audit retention", rows.Err())
}

// LogEntries returns the global log from index from on, in index order.
func (a *AuditSQL) LogEntries(ctx context.Context, from int64) ([]audit.LogEntry, error) {
	rows, err := a.d.Read.QueryContext(ctx, a.d.Queries["audit_log"], from)
	if err != nil {
		return nil, a.d.Classify("audit log", err)
	}
	defer rows.Close()
	var out []audit.LogEntry
	runs := map[string]string{} // one string per run: a log of a million entries holds few runs
	for rows.Next() {
		var e audit.LogEntry
		if err := rows.Scan(&e.Index, &e.RunID, &e.RunSeq, &e.Hash); err != nil {
			return nil, a.d.Classify("audit log", err)
		}
		if r, ok := runs[e.RunID]; ok {
			e.RunID = r
		} else {
			runs[e.RunID] = e.RunID
		}
		out = append(out, e)
	}
	return out, a.d.Classify("audit log", rows.Err())
}

// LogEntry returns an event's entry in the global log; ok is false when
// the checkpointer has not indexed it yet.
func (a *AuditSQL) LogEntry(ctx context.Context, runID string, runSeq int64) (e audit.LogEntry, ok bool, err error) {
	err = a.d.Read.QueryRowContext(ctx, a.d.Queries["audit_log_entry"], runID, runSeq).Scan(&e.Index, &e.RunID, &e.RunSeq, &e.Hash)
	if errors.Is(err, sql.ErrNoRows) {
		return e, false, nil
	}
	return e, err == nil, a.d.Classify("audit log", err)
}

// Checkpoints returns the stored checkpoints by tree size.
func (a *AuditSQL) Checkpoints(ctx context.Context) ([]audit.StoredCheckpoint, error) {
	return a.checkpoints(ctx, "audit_checkpoints")
}

// CheckpointsBetween returns the stored checkpoints of tree sizes lo..hi
// by size (delivery.CheckpointReader).
func (a *AuditSQL) CheckpointsBetween(ctx context.Context, lo, hi int64) ([]audit.StoredCheckpoint, error) {
	return a.checkpoints(ctx, "audit_checkpoints_between", lo, hi)
}

func (a *AuditSQL) checkpoints(ctx context.Context, query string, args ...any) ([]audit.StoredCheckpoint, error) {
	rows, err := a.d.Read.QueryContext(ctx, a.d.Queries[query], args...)
	if err != nil {
		return nil, a.d.Classify("audit checkpoints", err)
	}
	defer rows.Close()
	var out []audit.StoredCheckpoint
	for rows.Next() {
		var c audit.StoredCheckpoint
		var note string
		if err := rows.Scan(&c.Size, &c.Root, &note); err != nil {
			return nil, a.d.Classify("audit checkpoints", err)
		}
		c.Note = []byte(note)
		out = append(out, c)
	}
	return out, a.d.Classify("audit checkpoints", rows.Err())
}

// SaveCheckpoint stores a signed checkpoint (a second one of the same size
// is ignored: it signs the same root).
func (a *AuditSQL) SaveCheckpoint(ctx context.Context, cp audit.Checkpoint, at time.Time) error {
	return a.d.Write(ctx, func(tx Tx) error {
		_, err := tx.ExecContext(ctx, a.d.Queries["audit_insert_checkpoint"], cp.Size, base64.StdEncoding.EncodeToString(cp.Root[:]), string(cp.Note), a.d.Time(at), cp.Size)
		return err
	})
}

// LatestCheckpoint returns the stored checkpoint of the largest size.
func (a *AuditSQL) LatestCheckpoint(ctx context.Context) (audit.StoredCheckpoint, bool, error) {
	var c audit.StoredCheckpoint
	var note string
	err := a.d.Read.QueryRowContext(ctx, a.d.Queries["audit_latest_checkpoint"]).Scan(&c.Size, &c.Root, &note)
	if errors.Is(err, sql.ErrNoRows) {
		return c, false, nil
	}
	c.Note = []byte(note)
	return c, err == nil, a.d.Classify("audit checkpoints", err)
}
