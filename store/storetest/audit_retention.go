package storetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine/audit"
)

// testForgedRetention reproduces issue 25's Found 1 exactly: in the
// checkpointed FAILED run B an insider (triggers dropped) removes the
// payloads, turns StepFailed into StepCompleted and RunFailed into
// RunCompleted, sets the sequence row COMPLETED and inserts a retention
// row. Verify, against the checkpoint held outside, must name run B.
func testForgedRetention(t *testing.T, b AuditBackend) {
	q := func(s string) string { return "'" + s + "'" }
	s := b.Fresh(t)
	f := SeedAudit(t, s)
	b.Tamper(t, s,
		fmt.Sprintf(`UPDATE dvt_run_events SET payload = NULL WHERE run_id = %s`, q(f.B)),
		fmt.Sprintf(`UPDATE dvt_run_events SET event_type = 'StepCompleted' WHERE run_id = %s AND event_type = 'StepFailed'`, q(f.B)),
		fmt.Sprintf(`UPDATE dvt_run_events SET event_type = 'RunCompleted' WHERE run_id = %s AND event_type = 'RunFailed'`, q(f.B)),
		fmt.Sprintf(`UPDATE dvt_run_seq SET status = 'COMPLETED' WHERE run_id = %s`, q(f.B)),
		fmt.Sprintf(`INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff) VALUES (%s, '2026-05-01T00:00:00.000000000Z', '2026-04-01T00:00:00.000000000Z')`, q(f.B)))
	p := verify(t, s, audit.VerifyOptions{PublicKey: TestPublicKey, External: f.Checkpoint.Note}).Problem
	if p == nil || p.RunID != f.B || !strings.Contains(p.What, "retention") {
		t.Fatalf("forged retention of a FAILED run made COMPLETED: %v, want a break naming run %s", p, f.B)
	}
}
