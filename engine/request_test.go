package engine_test

import (
	"encoding/json"
	"errors"
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
