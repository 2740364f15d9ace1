package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// RunLevelStepID is stepIdNormalized for run-level events (RunEvents §3.1.7).
const RunLevelStepID = "RUN"

// KeyInput holds the six fields of the idempotency key, in derivation order.
// StepID is empty for run-level events.
type KeyInput struct {
	RunID            string
	StepID           string
	LogicalAttemptID int
	EventType        EventType
	PlanID           string
	PlanVersion      string
}

// Preimage returns the UTF-8 preimage of RunEvents §3.1:
// runId|stepIdNormalized|logicalAttemptId|eventType|planId|planVersion.
// It refuses fields that contain the delimiter and attempts below 0.
func (k KeyInput) Preimage() (string, error) {
	step := k.StepID
	if step == "" {
		step = RunLevelStepID
	}
	fields := [...]struct{ name, value string }{
		{"runId", k.RunID},
		{"stepId", step},
		{"eventType", string(k.EventType)},
		{"planId", k.PlanID},
		{"planVersion", k.PlanVersion},
	}
	for _, f := range fields {
		if strings.Contains(f.value, "|") {
			return "", Errorf(CodeSchemaValidationFailed, "%s %q contains the reserved delimiter '|'", f.name, f.value)
		}
	}
	if k.LogicalAttemptID < 0 {
		return "", Errorf(CodeSchemaValidationFailed, "logicalAttemptId %d is negative", k.LogicalAttemptID)
	}
	// strconv.Itoa renders base-10 ASCII without leading zeros (§3.1.6).
	return k.RunID + "|" + step + "|" + strconv.Itoa(k.LogicalAttemptID) + "|" +
		string(k.EventType) + "|" + k.PlanID + "|" + k.PlanVersion, nil
}

// IdempotencyKey returns hex(SHA-256(preimage)), lower case.
func (k KeyInput) IdempotencyKey() (string, error) {
	pre, err := k.Preimage()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(pre))
	return hex.EncodeToString(sum[:]), nil
}

// KeyOf returns the key input of an event's own fields.
func KeyOf(e RunEventWrite) KeyInput {
	return KeyInput{
		RunID:            e.RunID,
		StepID:           e.StepID,
		LogicalAttemptID: e.LogicalAttemptID,
		EventType:        e.EventType,
		PlanID:           e.PlanID,
		PlanVersion:      e.PlanVersion,
	}
}
