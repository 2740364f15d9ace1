package engine_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// TestValidateRunQueuedSelection: RunQueued's selection and parentRunId
// are checked against the schema on append.
func TestValidateRunQueuedSelection(t *testing.T) {
	cases := []struct {
		payload string
		ok      bool
	}{
		{`{"planRef": {}}`, true},
		{`{"selection": {"select": ["+a"], "exclude": [], "indirectSelection": "cautious", "steps": ["model.a"]}, "parentRunId": "r0"}`, true},
		{`{"selection": {"steps": []}}`, false},
		{`{"planRef": {}, "vars": {"region": "eu", "n": 1}, "dataInterval": {"start": "2026-11-24T00:00:00Z", "end": "2026-11-25T00:00:00Z", "timezone": "UTC"}}`, true},
		{`{"vars": ["eu"]}`, false},
		{`{"dataInterval": {"start": "2026-11-24T00:00:00Z"}}`, false},
		{`{"selection": {"select": ["+a"]}}`, false},
		{`{"selection": {"steps": ["model.a|b"]}}`, false},
		{`{"selection": {"steps": ["model.a"], "indirectSelection": "lazy"}}`, false},
		{`{"selection": "all"}`, false},
		{`{"parentRunId": ""}`, false},
		{`{"parentRunId": 7}`, false},
	}
	for _, tc := range cases {
		e := engine.RunEventWrite{EventID: "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b", EventType: engine.RunQueued, EmittedAt: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC),
			RunID: "run-1", TenantID: "acme", ProjectID: "shop", EnvironmentID: "dev", PlanID: "shop", PlanVersion: "3",
			EngineAttemptID: 1, LogicalAttemptID: 1, Payload: json.RawMessage(tc.payload)}
		k, err := engine.KeyOf(e).IdempotencyKey()
		if err != nil {
			t.Fatal(err)
		}
		e.IdempotencyKey = k
		err = engine.Validate(e)
		if tc.ok != (err == nil) {
			t.Errorf("%s: %v", tc.payload, err)
		}
		if err != nil && !errors.Is(err, engine.ErrSchemaValidationFailed) {
			t.Errorf("%s: %v is not SCHEMA_VALIDATION_FAILED", tc.payload, err)
		}
	}
}

// TestQueuedRequestVars: vars come back as recorded, numbers digit for
// digit (an id beyond 2^53 would be rounded as a float64).
func TestQueuedRequestVars(t *testing.T) {
	rec := []engine.RunEventRecord{{RunEventWrite: engine.RunEventWrite{EventType: engine.RunQueued, RunID: "r",
		Payload: json.RawMessage(`{"planRef":{},"vars":{"id":12345678901234567891,"ratio":0.25,"region":"eu","on":true,"none":null},"dataInterval":{"start":"2026-11-24T00:00:00Z","end":"2026-11-25T00:00:00Z","timezone":"UTC"}}`)}}}
	q, err := engine.QueuedRequest(rec)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"id": json.Number("12345678901234567891"), "ratio": json.Number("0.25"), "region": "eu", "on": true, "none": nil}
	if !reflect.DeepEqual(q.Vars, want) {
		t.Errorf("vars %#v, want %#v", q.Vars, want)
	}
	if iv := q.DataInterval; iv == nil || iv.Start != "2026-11-24T00:00:00Z" || iv.End != "2026-11-25T00:00:00Z" || iv.Timezone != "UTC" {
		t.Errorf("interval %+v", iv)
	}
}
