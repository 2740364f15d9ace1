package engine

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

var zeroTime time.Time

// durationMs is completed-started in whole milliseconds, both truncated to
// the millisecond first, so SQL can compute the same figure exactly.
func durationMs(started, completed time.Time) int64 {
	if started.IsZero() || completed.IsZero() {
		return 0
	}
	return completed.UnixMilli() - started.UnixMilli()
}

// payloadError reads payload.error. Payloads were validated on append; a
// field that does not decode is treated as absent.
func payloadError(p json.RawMessage) *ErrorInfo {
	if !bytes.Contains(p, []byte(`"error"`)) {
		return nil
	}
	var v struct {
		Error *ErrorInfo `json:"error"`
	}
	if json.Unmarshal(p, &v) != nil {
		return nil
	}
	return v.Error
}

// payloadAttemptStart is when the engine attempt behind a StepCompleted or
// StepFailed started (payload.attemptStartedAt), else started: the runner
// records it when the attempt is not the one the logical attempt's
// StepStarted began — a step run again after a resume, which gets no
// StepStarted of its own because that would repeat the logical attempt's
// idempotency key (RunEvents §3.1). So a step is timed by the attempt that
// did the work, not across a crash and the wait for its lease. Only a
// string in TimeFormat exactly (a valid instant) counts, as in the SQL
// projection.
func payloadAttemptStart(p json.RawMessage, started time.Time) time.Time {
	if !bytes.Contains(p, []byte(`"attemptStartedAt"`)) {
		return started
	}
	var v struct {
		At *string `json:"attemptStartedAt"`
	}
	if json.Unmarshal(p, &v) != nil || v.At == nil {
		return started
	}
	at, err := time.Parse(TimeFormat, *v.At)
	if err != nil {
		return started
	}
	return at
}

func payloadReason(p json.RawMessage) string {
	if !bytes.Contains(p, []byte(`"reason"`)) {
		return ""
	}
	var v struct {
		Reason string `json:"reason"`
	}
	if json.Unmarshal(p, &v) != nil {
		return ""
	}
	return v.Reason
}

func payloadArtifacts(p json.RawMessage) []ArtifactRef {
	// Most payloads have no artifacts: skip the decode (the reducer's hot path).
	if !bytes.Contains(p, []byte(`"artifacts"`)) {
		return nil
	}
	var v struct {
		Artifacts []ArtifactRef `json:"artifacts"`
	}
	if json.Unmarshal(p, &v) != nil {
		return nil
	}
	return v.Artifacts
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
