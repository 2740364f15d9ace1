package stepview_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/stepview"
)

func TestQueryHistorySQL(t *testing.T) {
	cases := []struct {
		ids  []string
		want string
	}{
		{nil, ""},
		{[]string{"01a-1", "01a-2"}, "WHERE query_id IN ('01a-1', '01a-2')"},
		{[]string{"it's"}, "WHERE query_id IN ('it''s')"},
	}
	for _, c := range cases {
		got := stepview.QueryHistorySQL(c.ids)
		if !strings.Contains(got, c.want) || (c.want == "") != (got == "") {
			t.Errorf("QueryHistorySQL(%q) = %q, want it to hold %q", c.ids, got, c.want)
		}
	}
}

// events builds a log: each spec is "Type step logical.engine payload".
func events(specs ...[4]string) []engine.RunEventRecord {
	at := time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC)
	var out []engine.RunEventRecord
	for i, s := range specs {
		var la, ea int
		if s[2] != "" {
			la, ea = int(s[2][0]-'0'), int(s[2][2]-'0')
		}
		e := engine.RunEventRecord{RunSeq: int64(i + 1)}
		e.RunID, e.EventType, e.StepID, e.LogicalAttemptID, e.EngineAttemptID = "r", engine.EventType(s[0]), s[1], la, ea
		e.EmittedAt = at.Add(time.Duration(i) * time.Second)
		if s[3] != "" {
			e.Payload = json.RawMessage(s[3])
		}
		out = append(out, e)
	}
	return out
}

type fakeLedger struct {
	found bool
	err   error
}

func (f fakeLedger) LookupStep(context.Context, string, string, int) (engine.LedgerEntry, bool, error) {
	return engine.LedgerEntry{EngineAttempt: 2, Fence: 3, CommittedAt: time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)}, f.found, f.err
}

func TestBuild(t *testing.T) {
	log := events(
		[4]string{"RunQueued", "", "1.1", ""},
		[4]string{"RunStarted", "", "1.1", ""},
		[4]string{"StepStarted", "model.a", "1.1", `{"kind":"model","relation":"a"}`},
		[4]string{"StepFailed", "model.a", "1.2", `{"durationMs":5,"sql":"select 1/0","error":{"code":"STEP_FAILED","message":"boom"},"queryIds":["q1"]}`},
		[4]string{"StepStarted", "model.a", "2.1", `{"kind":"model","relation":"a"}`},
		[4]string{"StepCompleted", "model.a", "2.1", `{"durationMs":7,"sql":"select 1","rowCount":1,"queryIds":["q2","q3"]}`},
		[4]string{"StepStarted", "test.t", "1.1", `{"kind":"test"}`},
		[4]string{"StepFailed", "test.t", "1.1", `{"sql":"select x","failures":9,"failingRows":{"columns":["x"],"rows":[[1],[null]]},"error":{"code":"STEP_FAILED","message":"9 rows"}}`},
		[4]string{"StepSkipped", "model.c", "1.1", `{"reason":"dependency failed"}`},
		[4]string{"StepStarted", "model.r", "1.1", `{"kind":"model"}`},
		[4]string{"StepCompleted", "model.r", "1.1", `{"sql":"select 2","ledger":{"engineAttempt":1,"fence":4,"committedAt":"2026-04-01T08:30:00Z"}}`},
	)
	snap := engine.Project("r", log)

	v, err := stepview.Build("r", snap, log, "model.a")
	if err != nil {
		t.Fatal(err)
	}
	// The latest outcome is the step's result; every start and outcome is an attempt.
	if v.SQL != "select 1" || v.RowCount != 1 || len(v.QueryIDs) != 2 || v.Kind != "model" || v.Relation != "a" || len(v.Attempts) != 4 ||
		v.Attempts[1].Error == nil || v.Attempts[1].Error.Message != "boom" || v.Attempts[1].EngineAttempt != 2 || v.Attempts[3].DurationMs != 7 ||
		!strings.Contains(v.QueryHistory, "'q2', 'q3'") || v.Step.Status != engine.StepStatusSuccess {
		t.Errorf("model.a: %+v", v)
	}
	if !v.NeedsLedger() {
		t.Fatal("model.a's ledger is not to be asked")
	}
	v.AskLedger(context.Background(), fakeLedger{found: true})
	if l := v.Ledger; !l.Checked || !l.Committed || l.EngineAttempt != 2 || l.Fence != 3 || l.LogicalAttempt != 2 {
		t.Errorf("model.a's ledger: %+v", l)
	}

	v, _ = stepview.Build("r", snap, log, "test.t")
	if v.Failures != 9 || v.FailingRows == nil || len(v.FailingRows.Rows) != 2 || v.FailingRows.Rows[1][0] != nil {
		t.Errorf("test.t: %+v", v)
	}
	v.NeedsLedger()
	v.AskLedger(context.Background(), fakeLedger{err: engine.Errorf(engine.CodeStoreUnavailable, "no warehouse")})
	if l := v.Ledger; l.Checked || !strings.Contains(l.NotCheckedWhy, "no warehouse") {
		t.Errorf("test.t's ledger when the warehouse fails: %+v", l)
	}

	v, _ = stepview.Build("r", snap, log, "model.c")
	if v.NeedsLedger() || v.Ledger.NotCheckedWhy == "" || len(v.Attempts) != 1 || v.Attempts[0].Reason != "dependency failed" {
		t.Errorf("model.c (skipped): %+v %+v", v, v.Ledger)
	}

	// A step completed from the ledger says so; the warehouse need not be asked.
	v, _ = stepview.Build("r", snap, log, "model.r")
	if v.NeedsLedger() || !v.Ledger.FromPayload || !v.Ledger.Committed || v.Ledger.Fence != 4 {
		t.Errorf("model.r: %+v", v.Ledger)
	}

	_, err = stepview.Build("r", snap, log, "model.nope\x1b[2J")
	if engine.CodeOf(err) != engine.CodeInvalidArgument || !strings.Contains(err.Error(), "model.a") || strings.Contains(err.Error(), "\x1b") {
		t.Errorf("an unknown step: %v", err)
	}
}
