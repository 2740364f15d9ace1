package engine_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

// validEvent returns a well-formed event of type t.
func validEvent(t engine.EventType, step string) engine.RunEventWrite {
	e := engine.RunEventWrite{
		EventID: "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b", EventType: t,
		EmittedAt: time.Date(2026, 5, 1, 10, 0, 0, 123_000_000, time.UTC), RunID: "run-1",
		TenantID: "acme", ProjectID: "shop", EnvironmentID: "dev", PlanID: "shop", PlanVersion: "3",
		EngineAttemptID: 1, LogicalAttemptID: 1, StepID: step,
	}
	switch t {
	case engine.StepFailed, engine.RunFailed:
		e.Payload = json.RawMessage(`{"error":{"code":"STEP_FAILED","message":"boom","retryable":false}}`)
	case engine.StepSkipped:
		e.Payload = json.RawMessage(`{"reason":"dependency failed"}`)
	case engine.SignalAccepted:
		e.Payload = json.RawMessage(`{"signalType":"PAUSE"}`)
	case engine.SignalRejected:
		e.Payload = json.RawMessage(`{"signalType":"RESUME","reason":"run is not paused"}`)
	}
	return rekey(e)
}

func rekey(e engine.RunEventWrite) engine.RunEventWrite {
	if k, err := engine.KeyOf(e).IdempotencyKey(); err == nil {
		e.IdempotencyKey = k
	}
	return e
}

func TestValidateAcceptsEveryKnownType(t *testing.T) {
	for _, typ := range engine.KnownEventTypes {
		step := ""
		if typ.StepLevel() {
			step = "model.orders"
		}
		if err := engine.Validate(validEvent(typ, step)); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
	}
	unknown := validEvent("StepDelayed", "model.orders")
	if err := engine.Validate(unknown); err != nil {
		t.Errorf("unknown type with stepId: %v", err)
	}
	unknown = validEvent("SomethingNew", "")
	if err := engine.Validate(unknown); err != nil {
		t.Errorf("unknown run-level type: %v", err)
	}
}

func TestValidateRejects(t *testing.T) {
	tests := []struct {
		name string
		mut  func(*engine.RunEventWrite)
		want string // a fragment of the message
	}{
		{"missing tenant", func(e *engine.RunEventWrite) { e.TenantID = "" }, "tenantId"},
		{"missing runId", func(e *engine.RunEventWrite) { e.RunID = "" }, "runId"},
		{"missing eventId", func(e *engine.RunEventWrite) { e.EventID = "" }, "eventId"},
		{"missing emittedAt", func(e *engine.RunEventWrite) { e.EmittedAt = time.Time{} }, "emittedAt is missing"},
		{"non-UTC time", func(e *engine.RunEventWrite) { e.EmittedAt = e.EmittedAt.In(time.FixedZone("CET", 3600)) }, "not UTC"},
		{"UTC offset zone that is not UTC", func(e *engine.RunEventWrite) { e.EmittedAt = e.EmittedAt.In(time.FixedZone("X", 0)) }, "not UTC"},
		{"bad UUID", func(e *engine.RunEventWrite) { e.EventID = "not-a-uuid" }, "/eventId"},
		{"UUID v1 is not v4", func(e *engine.RunEventWrite) { e.EventID = "6f1c2a3b-4d5e-1f60-8a7b-9c0d1e2f3a4b" }, "/eventId"},
		{"upper-case UUID", func(e *engine.RunEventWrite) { e.EventID = strings.ToUpper(e.EventID) }, "/eventId"},
		{"engine attempt 0", func(e *engine.RunEventWrite) { e.EngineAttemptID = 0 }, "/engineAttemptId"},
		{"logical attempt 0", func(e *engine.RunEventWrite) { e.LogicalAttemptID = 0 }, "/logicalAttemptId"},
		{"stepId on a run event", func(e *engine.RunEventWrite) { e.EventType = engine.RunStarted }, "stepId"},
		{"pipe in stepId", func(e *engine.RunEventWrite) { e.StepID = "model.a|b" }, "/stepId"},
		{"pipe in planVersion", func(e *engine.RunEventWrite) { e.PlanVersion = "1|2" }, "/planVersion"},
		{"wrong idempotency key", func(e *engine.RunEventWrite) { e.IdempotencyKey = strings.Repeat("a", 64) }, "idempotencyKey"},
		{"payload not an object", func(e *engine.RunEventWrite) { e.Payload = json.RawMessage(`[1,2]`) }, "/payload"},
		{"payload not JSON", func(e *engine.RunEventWrite) { e.Payload = json.RawMessage(`{"a":`) }, "payload is not valid JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := validEvent(engine.StepStarted, "model.orders")
			tc.mut(&e)
			if !strings.Contains(tc.name, "idempotency") {
				e = rekey(e)
			}
			err := engine.Validate(e)
			if err == nil {
				t.Fatal("accepted")
			}
			if engine.CodeOf(err) != engine.CodeSchemaValidationFailed {
				t.Fatalf("code %q: %v", engine.CodeOf(err), err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("message %q does not name %q", err, tc.want)
			}
		})
	}
}

func TestValidatePayloadRules(t *testing.T) {
	tests := []struct {
		typ     engine.EventType
		step    string
		payload string
	}{
		{engine.StepFailed, "s", ``},
		{engine.StepFailed, "s", `{"error":{"message":"no code"}}`},
		{engine.StepFailed, "s", `{"error":{"code":"","message":"empty code"}}`},
		{engine.RunFailed, "", `{"reason":"no error object"}`},
		{engine.StepSkipped, "s", `{}`},
		{engine.StepSkipped, "s", `{"reason":""}`},
		{engine.StepCompleted, "s", `{"artifacts":[{"uri":"s3://b/k"}]}`},
		{engine.StepCompleted, "s", `{"artifacts":[{"uri":"s3://b/k","kind":"csv","sizeBytes":-1}]}`},
		{engine.RunCompleted, "", `{"artifacts":[{"uri":"file:///r/run_results.json","kind":"dbt-run-results","sha256":"not hex"}]}`},
		{engine.RunFailed, "", `{"error":{"code":"STEP_FAILED","message":"m"},"artifacts":[{"kind":"dbt-run-results"}]}`},
		{engine.RunCancelled, "", `{"artifacts":{"uri":"file:///x","kind":"k"}}`},
		{engine.RunQueued, "", `{"fullRefresh":"yes"}`},
		{engine.StepStarted, "", ``},
		{engine.RunQueued, "", `{"planRef":"not an object"}`},
		{engine.RunQueued, "", `{"planRef":{"sha256":"ab","files":[{"path":"models/x.sql","sha256":"not hex"}]}}`},
		{engine.RunQueued, "", `{"planRef":{"files":[{"path":"","sha256":"` + strings.Repeat("a", 64) + `"}]}}`},
	}
	for _, tc := range tests {
		e := validEvent(tc.typ, tc.step)
		e.Payload = nil
		if tc.payload != "" {
			e.Payload = json.RawMessage(tc.payload)
		}
		e = rekey(e)
		if err := engine.Validate(e); engine.CodeOf(err) != engine.CodeSchemaValidationFailed {
			t.Errorf("%s %s accepted: %v", tc.typ, tc.payload, err)
		}
	}
}

func TestValidateMetadata(t *testing.T) {
	ok := engine.RunMetadata{RunID: "r", TenantID: "t", ProjectID: "p", EnvironmentID: "e", PlanID: "plan", PlanVersion: "1"}
	if err := engine.ValidateMetadata(ok); err != nil {
		t.Fatal(err)
	}
	bad := ok
	bad.PlanID = "a|b"
	if err := engine.ValidateMetadata(bad); engine.CodeOf(err) != engine.CodeSchemaValidationFailed {
		t.Fatalf("pipe accepted: %v", err)
	}
	bad = ok
	bad.TenantID = ""
	if err := engine.ValidateMetadata(bad); err == nil {
		t.Fatal("missing tenant accepted")
	}
}

func BenchmarkValidate(b *testing.B) {
	e := validEvent(engine.StepCompleted, "model.orders")
	e.Payload = json.RawMessage(`{"rowsAffected":1200,"rowCount":1200,"durationMs":153,"queryIds":["01b2c3d4-0000-1111-0000-000000000001"],"outputs":{"relation":"main.orders","materialized":"table"},"artifacts":[{"uri":"file:///tmp/orders.csv","kind":"csv","sizeBytes":1024}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := engine.Validate(e); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzValidateEventJSON: arbitrary JSON decoded as an event never makes
// Validate panic, and whatever it accepts survives a JSON round trip.
func FuzzValidateEventJSON(f *testing.F) {
	for _, typ := range engine.KnownEventTypes {
		step := ""
		if typ.StepLevel() {
			step = "model.orders"
		}
		b, _ := json.Marshal(validEvent(typ, step))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var e engine.RunEventWrite
		if json.Unmarshal(data, &e) != nil {
			return
		}
		if engine.Validate(e) != nil {
			return
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("accepted event does not marshal: %v", err)
		}
		var back engine.RunEventWrite
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if err := engine.Validate(back); err != nil {
			t.Fatalf("round trip broke an accepted event: %v", err)
		}
	})
}
