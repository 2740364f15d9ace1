package audit

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// VerifyOptions says what Verify checks.
type VerifyOptions struct {
	// RunID limits the chain checks to one run ("" checks every run): its
	// events, its rows in dvt_runs and dvt_run_seq and its entries in the
	// global log. The log's tree and the checkpoints are checked either
	// way: they are what shows a run deleted whole.
	RunID string
	// PublicKey is the pinned verifier key the checkpoints must be signed
	// with; required when there is a checkpoint to check.
	PublicKey string
	// External is a signed checkpoint held outside the store (a file);
	// the log must still have its root at its size.
	External []byte
}

// IndexGrace is how much older than the newest indexed event a chained
// event may be and still be missing from the global log. The checkpointer
// indexes every chained event committed when it runs, so an event missing
// from the log is either newer than the last indexing or was committed by
// a transaction still open when it ran (Postgres and Snowflake append runs
// concurrently; persisted_at is taken when the transaction starts). No
// append transaction stays open for an hour.
const IndexGrace = time.Hour

// Report is what Verify found: counts, and the first problem (nil when
// everything holds).
type Report struct {
	Runs, Events, Chained int64
	// V1 counts the chained events in the v1 form (appended before v2;
	// their payload is part of the hash), PayloadsRemoved the v2 events
	// whose payload retention removed.
	V1, PayloadsRemoved int64
	// Unindexed counts the chained events not yet in the global log (newer
	// than the checkpointer's last run).
	Unindexed   int64
	LogSize     int64
	Checkpoints int
	// Latest is the newest checkpoint verified (stored or external);
	// External the external one, when given and verified.
	Latest, External *Checkpoint
	Problem          *Problem
	// Retained names the runs whose retention record a verified checkpoint
	// signs, with when (each on its signed record, its links and the
	// signed log: not a break).
	Retained []RunHead
	// Pending names the runs recorded for retention whose record no
	// checkpoint signs yet: their payloads are all still there (an
	// interrupted retention; the next one finishes it).
	Pending []RunHead
	// Snapshot is true when every read saw one snapshot of the store;
	// otherwise Passes says how many times it was read (a problem is
	// reported when two passes find it).
	Snapshot bool
	Passes   int
	// NewRuns and Appended count the runs and the events appended while a
	// verification without a snapshot read the store (after the sequence
	// rows it checked them against): left to the next verification.
	NewRuns, Appended int64
}

// Verify recomputes every chain from the rows, cross-checks the runs of
// dvt_run_events, dvt_runs, dvt_run_seq and the global log, checks the log
// against the recomputed hashes and its tree against the checkpoints.
// Problems are in the report; err is for a store that cannot be read or an
// option that cannot be used.
//
// It reads a live store (appends, new runs and the checkpointer beside
// it) without taking an append for a break: in one snapshot where the
// store has them (Snapshotter), else in passes (see VerifyPasses).
func Verify(ctx context.Context, st Store, o VerifyOptions) (Report, error) {
	if sn, ok := st.(Snapshotter); ok {
		snap, release, err := sn.AuditSnapshot(ctx)
		if err != nil {
			return Report{}, err
		}
		if snap != nil {
			defer release()
			rep, err := verifyOnce(ctx, snap, o)
			rep.Snapshot, rep.Passes = true, 1
			return rep, err
		}
	}
	// Each read sees what was committed before it, so an append, a new run
	// or an index assigned between two reads can look like a break; a
	// tamper stays where it is. So: a clean pass is clean (no race hides a
	// change made before it: every pass reads every row it checks), and a
	// problem counts once two passes find the same one.
	seen := map[Problem]bool{}
	for pass := 1; ; pass++ {
		rep, err := verifyOnce(ctx, st, o)
		rep.Passes = pass
		if err != nil || rep.Problem == nil || seen[*rep.Problem] || pass == VerifyPasses {
			return rep, err
		}
		seen[*rep.Problem] = true
	}
}

// VerifyPasses is how many times Verify reads a store without snapshots
// before it reports a problem no two passes agreed on (the last one found).
const VerifyPasses = 5

// Snapshotter is a Store that can read in one consistent snapshot.
type Snapshotter interface {
	// AuditSnapshot returns a Store whose reads all see the database as it
	// was at one moment (a read-only transaction), and what ends it; nil
	// when this backend has no such reads (Snowflake: each statement sees
	// what was committed before it).
	AuditSnapshot(ctx context.Context) (Store, func(), error)
}

// verifyOnce is one pass of Verify over what st reads.
//
// Where the reads are not one snapshot, their order keeps an append, a new
// run, an index or a checkpoint made meanwhile from looking like a break:
// what a read finds, every later read finds too (the tables only grow, and
// an append writes its events and its sequence row in one transaction). So
// the checkpoints come before the log they sign, the log before the
// sequence rows of the runs it indexes, those before the run lists and
// each run's events, its events before their links. What a later read
// finds that an earlier one did not — a run with no sequence row, events
// beyond next_seq — is read again: gone from the doubt on the second read
// (the row now counts it) it is newer than this verification and left to
// the next (Report.NewRuns, Appended); still there it is a break.
func verifyOnce(ctx context.Context, st Store, o VerifyOptions) (Report, error) {
	var rep Report
	stored, err := st.Checkpoints(ctx)
	if err != nil {
		return rep, err
	}
	entries, err := st.LogEntries(ctx, 0)
	if err != nil {
		return rep, err
	}
	retentions, err := st.Retentions(ctx)
	if err != nil {
		return rep, err
	}
	heads, err := st.AuditRuns(ctx, o.RunID)
	if err != nil {
		return rep, err
	}
	ids, err := st.AuditRunIDs(ctx, o.RunID)
	if err != nil {
		return rep, err
	}
	// A genesis row un-chains a run's first events: checked first, so the
	// break names it rather than the links it un-did.
	if p := genesisChecked(heads, entries); p != nil {
		rep.Problem = p
		return rep, nil
	}
	headOf := make(map[string]RunHead, len(heads))
	names := map[string]bool{}
	for _, h := range heads {
		headOf[h.RunID] = h
		names[h.RunID] = true
	}
	inEvents, inRuns := map[string]bool{}, map[string]bool{}
	for _, r := range ids.Events {
		inEvents[r], names[r] = true, true
	}
	for _, r := range ids.Runs {
		inRuns[r], names[r] = true, true
	}
	inLog := map[string]bool{}
	for _, e := range entries {
		// Retention records are entries of their own, not a run's events:
		// retainedCovered and the log check below judge them.
		if e.RunID != RetentionRunID && (o.RunID == "" || e.RunID == o.RunID) {
			inLog[e.RunID], names[e.RunID] = true, true
		}
	}
	if o.RunID != "" && len(names) == 0 {
		return rep, engine.Errorf(engine.CodeRunNotFound, "run %s not found", o.RunID)
	}
	results := make(map[string]*runResult, len(names))
	retained := map[string]retainedRun{} // runs with a retention row
	// The first run whose sequence row's head is not its chain's, named
	// after the log check: an entry of the log without its event says more.
	var headProblem *Problem
	for _, run := range slices.Sorted(maps.Keys(names)) {
		h, hasHead := headOf[run]
		if !hasHead && !inLog[run] && (inEvents[run] || inRuns[run]) {
			again, err := st.AuditRuns(ctx, run)
			if err != nil {
				return rep, err
			}
			if len(again) == 1 {
				rep.NewRuns++ // bootstrapped after the sequence rows were read
				continue
			}
		}
		switch {
		case !hasHead && !inEvents[run] && (!inRuns[run] || inLog[run]):
			continue // its events deleted with it: VerifyLog names its first entry in the log
		case !hasHead && inEvents[run]:
			rep.Problem = &Problem{RunID: run, RunSeq: 1, What: "events are stored, but the run has no sequence row (dvt_run_seq): it was deleted"}
		case !hasHead:
			rep.Problem = &Problem{RunID: run, What: "the run is in dvt_runs, but has no sequence row (dvt_run_seq): it was deleted"}
		case !inRuns[run]:
			rep.Problem = &Problem{RunID: run, RunSeq: 1, What: "the run has a sequence row but no dvt_runs row: it was deleted"}
		}
		if rep.Problem != nil {
			return rep, nil
		}
		recs, err := st.ListEvents(ctx, run, 0, 0)
		if err != nil {
			return rep, err
		}
		links, err := st.Links(ctx, run)
		if err != nil {
			return rep, err
		}
		var appended int64
		if recs, appended, err = appendedSince(ctx, st, h, recs, links); err != nil {
			return rep, err
		}
		rep.Appended += appended
		res, p := checkRun(RunChain{RunID: run, Status: h.Status, NextSeq: h.NextSeq, FirstSeq: h.FirstSeq, Retained: h.RetainedAt != "", Records: recs, Links: links})
		if p != nil {
			rep.Problem = p
			return rep, nil
		}
		rep.Runs++
		rep.Events += int64(len(recs))
		rep.Chained += res.v1 + res.v2
		rep.V1 += res.v1
		rep.PayloadsRemoved += res.removed
		if head := res.head(); h.LastHash != head && headProblem == nil {
			headProblem = &Problem{RunID: run, RunSeq: res.headSeq(), What: fmt.Sprintf("the sequence row's last_hash %s is not the chain's head %s: dvt_run_seq or the chain was changed", short(h.LastHash), short(head))}
		}
		if h.RetainedAt != "" {
			rep.Retained = append(rep.Retained, h)
			retained[run] = retainedOf(recs, &res)
		}
		results[run] = &res
	}
	if rep.Problem = checkIndexed(entries, results); rep.Problem != nil {
		return rep, nil
	}
	for _, r := range results {
		for i, c := range r.chained {
			if c && r.index[i] < 0 {
				rep.Unindexed++
			}
		}
	}
	// A retention record's leaf is the hash of its signed note, recomputed
	// from the note dvt_audit_retention holds.
	leaves := make(map[int64]string, len(retentions))
	for _, r := range retentions {
		if len(r.Note) > 0 {
			leaves[r.Seq] = RetentionLeaf(r.Note)
		}
	}
	tree, p := VerifyLog(entries, func(e LogEntry) (string, bool) {
		if e.RunID == RetentionRunID {
			h, ok := leaves[e.RunSeq]
			return h, ok
		}
		r, checked := results[e.RunID]
		if !checked {
			if o.RunID != "" && e.RunID != o.RunID {
				return e.Hash, true // another run's entry: `--all` checks it
			}
			return "", false
		}
		i := e.RunSeq - 1
		if i < 0 || i >= int64(len(r.chained)) || !r.chained[i] {
			return "", false
		}
		return hex.EncodeToString(r.hashes[i][:]), true
	})
	if p != nil {
		rep.Problem = p
		return rep, nil
	}
	if headProblem != nil {
		rep.Problem = headProblem
		return rep, nil
	}
	rep.LogSize = tree.Size()
	if (len(stored) > 0 || o.External != nil) && o.PublicKey == "" {
		return rep, engine.Errorf(engine.CodeInvalidArgument, "no public key is pinned to check the checkpoints with (--public-key, or audit.publicKey in the configuration)")
	}
	if rep.Problem = checkCheckpoints(&rep, tree, entries, stored, o); rep.Problem != nil {
		return rep, nil
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

// appendedSince leaves out of a run's events, read after its sequence row
// h, those appended since: beyond h's next_seq, in a run h does not show
// ended, and counted by the sequence row read again now (an append writes
// both in one transaction). Anything else beyond h stays, for checkRun to
// name. Links read after the events lose those beyond them the same way.
func appendedSince(ctx context.Context, st Store, h RunHead, recs []engine.RunEventRecord, links map[int64]StoredLink) ([]engine.RunEventRecord, int64, error) {
	n := len(recs)
	for n > 0 && recs[n-1].RunSeq >= h.NextSeq {
		n--
	}
	if n < len(recs) {
		if h.Status.Terminal() {
			n = len(recs) // nothing is appended to an ended run
		} else {
			again, err := st.AuditRuns(ctx, h.RunID)
			if err != nil {
				return nil, 0, err
			}
			if len(again) != 1 || recs[len(recs)-1].RunSeq >= again[0].NextSeq {
				n = len(recs)
			}
		}
	}
	last := int64(0)
	if n > 0 {
		last = recs[n-1].RunSeq
	}
	for seq := range links {
		if seq > last {
			delete(links, seq)
		}
	}
	return recs[:n], int64(len(recs) - n), nil
}

// checkIndexed checks each checked run's chained events against the global
// log: each in it at most once; none missing before one of the same run
// that is in it (the checkpointer indexes a run's events in runSeq order,
// all committed ones at once); none missing that is more than IndexGrace
// older than the newest indexed event. It records each event's log index
// (-1 when not indexed) in its run's result.
func checkIndexed(entries []LogEntry, results map[string]*runResult) *Problem {
	for _, r := range results {
		r.index = make([]int64, len(r.chained))
		for i := range r.index {
			r.index[i] = -1
		}
	}
	newest := int64(math.MinInt64)
	for _, e := range entries {
		r, ok := results[e.RunID]
		i := e.RunSeq - 1
		if !ok || i < 0 || i >= int64(len(r.chained)) || !r.chained[i] {
			continue // VerifyLog names it
		}
		if r.index[i] >= 0 {
			return &Problem{RunID: e.RunID, RunSeq: e.RunSeq, What: fmt.Sprintf("in the global log twice, at index %d and %d", r.index[i], e.Index)}
		}
		r.index[i] = e.Index
		newest = max(newest, r.persisted[i])
	}
	for _, run := range slices.Sorted(maps.Keys(results)) {
		r := results[run]
		later := int64(-1) // the next indexed runSeq's position, walking back
		for i := len(r.chained) - 1; i >= 0; i-- {
			if !r.chained[i] {
				continue
			}
			if r.index[i] >= 0 {
				later = int64(i)
				continue
			}
			seq := int64(i) + 1
			if later >= 0 {
				return &Problem{RunID: run, RunSeq: seq, What: fmt.Sprintf("not in the global log, though the run's later runSeq %d is (at index %d): its entry was removed", later+1, r.index[later])}
			}
			if newest != math.MinInt64 && r.persisted[i] < newest-int64(IndexGrace) {
				return &Problem{RunID: run, RunSeq: seq, What: fmt.Sprintf("not in the global log, though it was persisted more than %s before events that are: its entry was removed, or the event was inserted outside the append path", IndexGrace)}
			}
		}
	}
	return nil
}

// checkCheckpoints opens every stored checkpoint and the external one with
// the pinned key and compares each root with the log's root at its size.
// When one does not match, the signed checkpoints bracket where the log
// departs from what was signed: after the largest size whose root still
// matches, at or before the smallest that does not. A root alone says
// nothing about which of its leaves changed, so that bracket is as precise
// as the evidence: one index when two checkpoints are one apart.
func checkCheckpoints(rep *Report, tree *Tree, entries []LogEntry, stored []StoredCheckpoint, o VerifyOptions) *Problem {
	type signed struct {
		cp       Checkpoint
		src      string
		external bool
	}
	var all []signed
	for _, s := range stored {
		src := fmt.Sprintf("stored checkpoint of size %d", s.Size)
		cp, err := Open(s.Note, o.PublicKey)
		if err != nil {
			return &Problem{What: fmt.Sprintf("%s: %v", src, err)}
		}
		if cp.Size != s.Size || base64.StdEncoding.EncodeToString(cp.Root[:]) != s.Root {
			return &Problem{What: src + ": its row's size or root differs from the signed note"}
		}
		all = append(all, signed{cp, src, false})
	}
	if o.External != nil {
		cp, err := Open(o.External, o.PublicKey)
		if err != nil {
			return &Problem{What: fmt.Sprintf("the external checkpoint: %v", err)}
		}
		all = append(all, signed{cp, "the external checkpoint", true})
	}
	var matched int64 // the largest size whose root matches
	var first *signed // the smallest size whose root does not
	for i, s := range all {
		if s.cp.Size > tree.Size() {
			return &Problem{What: fmt.Sprintf("%s covers %d events but the log holds %d: events were removed", s.src, s.cp.Size, tree.Size())}
		}
		root, err := tree.Root(s.cp.Size)
		if err != nil {
			return &Problem{What: fmt.Sprintf("%s: %v", s.src, err)}
		}
		if root != s.cp.Root {
			if first == nil || s.cp.Size < first.cp.Size {
				first = &all[i]
			}
			continue
		}
		matched = max(matched, s.cp.Size)
	}
	if first != nil {
		return departure(entries, matched, first.cp.Size, first.src)
	}
	for _, s := range all {
		cp := s.cp
		if s.external {
			rep.External = &cp
		} else {
			rep.Checkpoints++
		}
		if rep.Latest == nil || cp.Size > rep.Latest.Size {
			rep.Latest = &cp
		}
	}
	return nil
}

// departure names where the log departs from the signed tree: the first
// index no matching checkpoint vouches for (lo), with its run and runSeq.
func departure(entries []LogEntry, lo, hi int64, src string) *Problem {
	e := entries[lo]
	where := fmt.Sprintf("log index %d", lo)
	if hi-lo > 1 {
		where = fmt.Sprintf("log indexes %d to %d (the first of them is named; the signed checkpoints bracket the change no closer)", lo, hi-1)
	}
	matched := fmt.Sprintf("its first %d do", lo)
	if lo == 0 {
		matched = "and no smaller signed checkpoint matches"
	}
	return &Problem{RunID: e.RunID, RunSeq: e.RunSeq, What: fmt.Sprintf("%s: the log's first %d events do not have the signed root, %s: the log departs from the signed tree at %s: the log was rewritten", src, hi, matched, where)}
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
