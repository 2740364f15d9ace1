package audit

import (
	"context"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// VerifyOptions says what Verify checks.
type VerifyOptions struct {
	// RunID limits the chain checks to one run ("" checks every run). The
	// global log and the checkpoints are checked either way: they are what
	// shows a run deleted whole.
	RunID string
	// PublicKey is the pinned verifier key the checkpoints must be signed
	// with; required when there is a checkpoint to check.
	PublicKey string
	// External is a signed checkpoint held outside the store (a file);
	// the log must still have its root at its size.
	External []byte
}

// Report is what Verify found: counts, and the first problem (nil when
// everything holds).
type Report struct {
	Runs, Events, Chained int64
	LogSize               int64
	Checkpoints           int
	// Latest is the newest checkpoint verified (stored or external).
	Latest  *Checkpoint
	Problem *Problem
	// Retained names the runs whose payloads retention removed, with when
	// (each on its signed retention record, its links and the signed log:
	// not a break).
	Retained []RunHead
	// Pending names the runs recorded for retention whose record no
	// checkpoint signs yet: their payloads are all still there (an
	// interrupted retention; the next one finishes it).
	Pending []RunHead
}

// Verify recomputes every chain and the log's tree and checks the
// checkpoints against them. Problems are in the report; err is for a store
// that cannot be read or an option that cannot be used.
func Verify(ctx context.Context, st Store, o VerifyOptions) (Report, error) {
	var rep Report
	heads, err := st.AuditRuns(ctx, o.RunID)
	if err != nil {
		return rep, err
	}
	entries, err := st.LogEntries(ctx, 0)
	if err != nil {
		return rep, err
	}
	// A genesis row un-chains a run's first events: checked first, so the
	// break names it rather than the links it un-did.
	if p := genesisChecked(heads, entries); p != nil {
		rep.Problem = p
		return rep, nil
	}
	retained := map[string]retainedRun{} // runs with a retention row
	for _, h := range heads {
		recs, err := st.ListEvents(ctx, h.RunID, 0, 0)
		if err != nil {
			return rep, err
		}
		links, err := st.Links(ctx, h.RunID)
		if err != nil {
			return rep, err
		}
		rep.Runs++
		rep.Events += int64(len(recs))
		for _, l := range links {
			if l.Hash != "" {
				rep.Chained++
			}
		}
		if h.RetainedAt != "" {
			rep.Retained = append(rep.Retained, h)
			retained[h.RunID] = retainedOf(recs, links)
		}
		if p := VerifyRun(RunChain{RunID: h.RunID, Status: h.Status, NextSeq: h.NextSeq, FirstSeq: h.FirstSeq, Retained: h.RetainedAt != "", Records: recs, Links: links}); p != nil {
			rep.Problem = p
			return rep, nil
		}
	}
	hashes, err := st.EventHashes(ctx)
	if err != nil {
		return rep, err
	}
	retentions, err := st.Retentions(ctx)
	if err != nil {
		return rep, err
	}
	// A retention record's leaf is the hash of its signed note.
	for _, r := range retentions {
		if len(r.Note) > 0 {
			if hashes[RetentionRunID] == nil {
				hashes[RetentionRunID] = map[int64]string{}
			}
			hashes[RetentionRunID][r.Seq] = RetentionLeaf(r.Note)
		}
	}
	if o.RunID != "" && len(heads) == 0 {
		for _, e := range entries {
			if e.RunID == o.RunID {
				rep.Problem = &Problem{RunID: o.RunID, What: fmt.Sprintf("the run is gone, but the log holds its runSeq %d at index %d", e.RunSeq, e.Index)}
				return rep, nil
			}
		}
		return rep, engine.Errorf(engine.CodeRunNotFound, "run %s not found", o.RunID)
	}
	tree, p := VerifyLog(entries, func(run string, seq int64) (string, bool) {
		h, ok := hashes[run][seq]
		return h, ok
	})
	if p != nil {
		rep.Problem = p
		return rep, nil
	}
	rep.LogSize = tree.Size()
	stored, err := st.Checkpoints(ctx)
	if err != nil {
		return rep, err
	}
	if (len(stored) > 0 || o.External != nil) && o.PublicKey == "" {
		return rep, engine.Errorf(engine.CodeInvalidArgument, "no public key is pinned to check the checkpoints with (--public-key, or audit.publicKey in the configuration)")
	}
	for _, s := range stored {
		src := fmt.Sprintf("stored checkpoint of size %d", s.Size)
		cp, p := VerifyCheckpoint(tree, s.Note, o.PublicKey, src)
		if p == nil && (cp.Size != s.Size || base64.StdEncoding.EncodeToString(cp.Root[:]) != s.Root) {
			p = &Problem{What: src + ": its row's size or root differs from the signed note"}
		}
		if p != nil {
			rep.Problem = p
			return rep, nil
		}
		rep.Checkpoints++
		rep.Latest = &cp
	}
	if o.External != nil {
		cp, p := VerifyCheckpoint(tree, o.External, o.PublicKey, "the external checkpoint")
		if p != nil {
			rep.Problem = p
			return rep, nil
		}
		if rep.Latest == nil || cp.Size > rep.Latest.Size {
			rep.Latest = &cp
		}
	}
	var pending map[string]bool
	if rep.Problem, pending = retainedCovered(entries, retained, retentions, rep.Latest, o.PublicKey); rep.Problem != nil {
		return rep, nil
	}
	kept := rep.Retained[:0]
	for _, h := range rep.Retained {
		if pending[h.RunID] {
			rep.Pending = append(rep.Pending, h)
		} else {
			kept = append(kept, h)
		}
	}
	rep.Retained = kept
	return rep, nil
}

// CheckpointLog is the global log as the checkpointer writes it.
type CheckpointLog interface {
	Log
	LatestCheckpoint(ctx context.Context) (StoredCheckpoint, bool, error)
	SaveCheckpoint(ctx context.Context, cp Checkpoint, at time.Time) error
}

// Checkpointer indexes chained events into the global log and signs a
// checkpoint whenever the log grew. It keeps the tree between calls, so a
// service reads only the new entries each time.
type Checkpointer struct {
	Log        CheckpointLog
	SigningKey string
	Now        func() time.Time
	tree       Tree
}

// Checkpoint brings the log up to date and returns the newest checkpoint;
// fresh is true when this call signed it.
func (c *Checkpointer) Checkpoint(ctx context.Context) (cp Checkpoint, fresh bool, err error) {
	if _, err := c.Log.AssignLogIndexes(ctx); err != nil {
		return cp, false, err
	}
	entries, err := c.Log.LogEntries(ctx, c.tree.Size())
	if err != nil {
		return cp, false, err
	}
	for _, e := range entries {
		if e.Index != c.tree.Size() {
			return cp, false, engine.Errorf(engine.CodeStoreCorrupt, "the audit log skips from index %d to %d", c.tree.Size()-1, e.Index)
		}
		if err := c.tree.Add(e.Hash); err != nil {
			return cp, false, err
		}
	}
	latest, ok, err := c.Log.LatestCheckpoint(ctx)
	if err != nil {
		return cp, false, err
	}
	if ok && latest.Size >= c.tree.Size() {
		return Checkpoint{Size: latest.Size, Note: latest.Note}, false, nil
	}
	root, err := c.tree.Root(c.tree.Size())
	if err != nil {
		return cp, false, err
	}
	if cp, err = Sign(c.SigningKey, c.tree.Size(), root); err != nil {
		return cp, false, err
	}
	if err := c.Log.SaveCheckpoint(ctx, cp, c.Now()); err != nil {
		return cp, false, err
	}
	return cp, true, nil
}
