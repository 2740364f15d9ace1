package engine_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

type vector struct {
	Name              string `json:"name"`
	RunID             string `json:"runId"`
	StepID            string `json:"stepId"`
	StepIDNormalized  string `json:"stepIdNormalized"`
	LogicalAttemptID  int    `json:"logicalAttemptId"`
	EventType         string `json:"eventType"`
	PlanID            string `json:"planId"`
	PlanVersion       string `json:"planVersion"`
	Preimage          string `json:"preimage"`
	ExpectedSha256Hex string `json:"expectedSha256Hex"`
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "RunEvents.v2.0.1.idempotency_vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) < 5 {
		t.Fatalf("%d vectors, RunEvents §3.3 requires at least 5", len(vs))
	}
	return vs
}

// TestGoldenVectors is the required gate of RunEvents §3.3.
func TestGoldenVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			k := engine.KeyInput{RunID: v.RunID, StepID: v.StepID, LogicalAttemptID: v.LogicalAttemptID, EventType: engine.EventType(v.EventType), PlanID: v.PlanID, PlanVersion: v.PlanVersion}
			pre, err := k.Preimage()
			if err != nil {
				t.Fatal(err)
			}
			if pre != v.Preimage {
				t.Fatalf("preimage %q, want %q", pre, v.Preimage)
			}
			got, err := k.IdempotencyKey()
			if err != nil {
				t.Fatal(err)
			}
			if got != v.ExpectedSha256Hex {
				t.Fatalf("key %s, want %s", got, v.ExpectedSha256Hex)
			}
			sum := sha256.Sum256([]byte(v.Preimage)) // the vector is self-consistent
			if hex.EncodeToString(sum[:]) != v.ExpectedSha256Hex {
				t.Fatalf("vector's own preimage does not hash to its digest")
			}
		})
	}
}

// TestForbiddenFieldsDoNotAffectKey: tenancy and engineAttemptId are not
// part of the derivation (§3.1.8).
func TestForbiddenFieldsDoNotAffectKey(t *testing.T) {
	v := loadVectors(t)[0]
	base := engine.RunEventWrite{EventType: engine.EventType(v.EventType), RunID: v.RunID, StepID: v.StepID, PlanID: v.PlanID, PlanVersion: v.PlanVersion, LogicalAttemptID: v.LogicalAttemptID}
	for _, mut := range []func(*engine.RunEventWrite){
		func(e *engine.RunEventWrite) { e.TenantID = "other-tenant" },
		func(e *engine.RunEventWrite) { e.ProjectID = "other-project" },
		func(e *engine.RunEventWrite) { e.EnvironmentID = "prod" },
		func(e *engine.RunEventWrite) { e.EngineAttemptID = 7 },
		func(e *engine.RunEventWrite) { e.EventID = "11111111-1111-4111-8111-111111111111" },
	} {
		e := base
		mut(&e)
		got, err := engine.KeyOf(e).IdempotencyKey()
		if err != nil || got != v.ExpectedSha256Hex {
			t.Fatalf("key changed with a forbidden field: %s %v", got, err)
		}
	}
}

func TestKeyInputRules(t *testing.T) {
	tests := []struct {
		name    string
		in      engine.KeyInput
		want    string // preimage
		wantErr bool
	}{
		{"run level uses RUN", engine.KeyInput{RunID: "r", LogicalAttemptID: 1, EventType: "RunStarted", PlanID: "p", PlanVersion: "1"}, "r|RUN|1|RunStarted|p|1", false},
		{"no leading zeros", engine.KeyInput{RunID: "r", StepID: "s", LogicalAttemptID: 10, EventType: "StepStarted", PlanID: "p", PlanVersion: "010"}, "r|s|10|StepStarted|p|010", false},
		{"verbatim, case-sensitive, untrimmed", engine.KeyInput{RunID: " R ", StepID: "Model.Ä", LogicalAttemptID: 1, EventType: "StepStarted", PlanID: "p", PlanVersion: "1"}, " R |Model.Ä|1|StepStarted|p|1", false},
		{"pipe in runId", engine.KeyInput{RunID: "a|b", LogicalAttemptID: 1, EventType: "RunStarted", PlanID: "p", PlanVersion: "1"}, "", true},
		{"pipe in stepId", engine.KeyInput{RunID: "r", StepID: "a|b", LogicalAttemptID: 1, EventType: "StepStarted", PlanID: "p", PlanVersion: "1"}, "", true},
		{"pipe in eventType", engine.KeyInput{RunID: "r", LogicalAttemptID: 1, EventType: "Run|Started", PlanID: "p", PlanVersion: "1"}, "", true},
		{"pipe in planId", engine.KeyInput{RunID: "r", LogicalAttemptID: 1, EventType: "RunStarted", PlanID: "p|", PlanVersion: "1"}, "", true},
		{"pipe in planVersion", engine.KeyInput{RunID: "r", LogicalAttemptID: 1, EventType: "RunStarted", PlanID: "p", PlanVersion: "|1"}, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.Preimage()
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil && engine.CodeOf(err) != engine.CodeSchemaValidationFailed {
				t.Fatalf("code %s", engine.CodeOf(err))
			}
			if got != tc.want {
				t.Fatalf("preimage %q, want %q", got, tc.want)
			}
		})
	}
}
