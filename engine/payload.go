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
