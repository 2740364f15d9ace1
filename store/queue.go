package store

import (
	"context"
	"database/sql"

	"github.com/dvtrun/dvtrun/engine/queue"
)

// claimCandidates reads, inside the claim transaction, the rows that look
// claimable (query claim_candidates: takeovers first, then PENDING by
// priority and enqueue order), the runs active per plan (active_by_plan)
// and the busy schedules (busy_schedules), and returns the candidates the
// limits allow, in claim order; the claim itself is the conditional UPDATE
// on each candidate's (id, version).
func claimCandidates(ctx context.Context, tx Tx, q map[string]string, l queue.ClaimLimits) ([]candidate, error) {
	cands, err := readCandidates(ctx, tx, q)
	if err != nil {
		return nil, err
	}
	busy, err := readBusy(ctx, tx, q)
	if err != nil {
		return nil, err
	}
	active, err := readActive(ctx, tx, q)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, n := range active {
		total += n
	}
	var out []candidate
	for _, c := range cands {
		if c.claimable(l, total, active, busy) {
			out = append(out, c)
		}
	}
	return out, nil
}

// candidate is a claimable-looking row with what the limits need.
type candidate struct {
	id, planID, state, sched string
	version, seq             int64
	serial                   bool
}

// claimable applies the limits: a takeover always (its run already
// counts), a PENDING request only within the concurrency limits and, if
// serial, when its schedule is idle and it is the schedule's first.
// total is the sum of active.
func (c candidate) claimable(l queue.ClaimLimits, total int, active map[string]int, busy map[string]scheduleBusy) bool {
	if c.state != string(queue.StatePending) {
		return true
	}
	if !l.Allows(c.planID, total, active[c.planID]) {
		return false
	}
	if c.serial && c.sched != "" {
		b := busy[c.sched]
		return b.active == 0 && b.firstPending == c.seq
	}
	return true
}

type scheduleBusy struct {
	active       int
	firstPending int64
}

func readCandidates(ctx context.Context, tx Tx, q map[string]string) ([]candidate, error) {
	rows, err := tx.QueryContext(ctx, q["claim_candidates"])
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []candidate
	for rows.Next() {
		var c candidate
		var serial int
		if err := rows.Scan(&c.id, &c.planID, &c.version, &c.state, &c.sched, &serial, &c.seq); err != nil {
			return nil, err
		}
		c.serial = serial == 1
		out = append(out, c)
	}
	return out, rows.Err()
}

func readActive(ctx context.Context, tx Tx, q map[string]string) (map[string]int, error) {
	rows, err := tx.QueryContext(ctx, q["active_by_plan"])
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var plan string
		var n int
		if err := rows.Scan(&plan, &n); err != nil {
			return nil, err
		}
		out[plan] = n
	}
	return out, rows.Err()
}

func readBusy(ctx context.Context, tx Tx, q map[string]string) (map[string]scheduleBusy, error) {
	rows, err := tx.QueryContext(ctx, q["busy_schedules"])
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]scheduleBusy{}
	for rows.Next() {
		var name string
		var b scheduleBusy
		var first sql.NullInt64
		if err := rows.Scan(&name, &b.active, &first); err != nil {
			return nil, err
		}
		b.firstPending = first.Int64
		out[name] = b
	}
	return out, rows.Err()
}
