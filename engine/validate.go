package engine

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var printer = message.NewPrinter(language.English)

// The JSON Schemas events are checked against before anything is persisted
// (ExecutionSemantics Appendix A): one per known type, and the envelope
// alone for types dvtrun does not know.
//
//go:embed schemas/*.schema.json
var schemaFiles embed.FS

// SchemaBase is the $id prefix of dvtrun's JSON schemas (events here, the
// plan's in engine/plan).
const SchemaBase = "https://dvtrun.dev/schemas/"

var schemas = sync.OnceValues(func() (map[EventType]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	entries, err := fs.ReadDir(schemaFiles, "schemas")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := schemaFiles.ReadFile(path.Join("schemas", e.Name()))
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", e.Name(), err)
		}
		if err := c.AddResource(SchemaBase+e.Name(), doc); err != nil {
			return nil, err
		}
	}
	out := make(map[EventType]*jsonschema.Schema)
	for _, t := range append([]EventType{""}, KnownEventTypes...) {
		name := "envelope"
		if t != "" {
			name = string(t)
		}
		s, err := c.Compile(SchemaBase + name + ".schema.json")
		if err != nil {
			return nil, fmt.Errorf("compile %s schema: %w", name, err)
		}
		out[t] = s
	}
	return out, nil
})

// Validate checks an event before it is persisted: the JSON Schema of its
// type (the envelope for unknown types), UTC times, and that the
// idempotencyKey is the §3.1 derivation of the event's own fields. The error
// is SCHEMA_VALIDATION_FAILED with a sentence naming each bad field.
func Validate(e RunEventWrite) error {
	all, err := schemas()
	if err != nil {
		return Errorf(CodeSchemaValidationFailed, "event schemas do not compile: %w", err)
	}
	var problems []string
	if e.EmittedAt.IsZero() {
		problems = append(problems, "emittedAt is missing")
	} else if _, off := e.EmittedAt.Zone(); off != 0 || e.EmittedAt.Location() != time.UTC {
		problems = append(problems, fmt.Sprintf("emittedAt %s is not UTC", e.EmittedAt.Format(time.RFC3339Nano)))
	}
	switch {
	case e.EventType.StepLevel() && e.StepID == "":
		problems = append(problems, "stepId is required on step-level events (RunEvents §2.2)")
	case e.EventType.Known() && !e.EventType.StepLevel() && e.StepID != "":
		problems = append(problems, "stepId must be absent on run-level events (RunEvents §2.2)")
	}
	inst, perr := instance(e)
	if perr != nil {
		problems = append(problems, perr.Error())
	} else {
		s := all[e.EventType]
		if s == nil {
			s = all[""]
		}
		if verr := s.Validate(inst); verr != nil {
			problems = append(problems, SchemaProblems(verr)...)
		}
	}
	if len(problems) == 0 {
		want, kerr := KeyOf(e).IdempotencyKey()
		switch {
		case kerr != nil:
			problems = append(problems, kerr.Error())
		case want != e.IdempotencyKey:
			problems = append(problems, fmt.Sprintf("idempotencyKey %s is not SHA-256(runId|stepIdNormalized|logicalAttemptId|eventType|planId|planVersion) = %s", e.IdempotencyKey, want))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &Error{
		Code: CodeSchemaValidationFailed,
		Msg:  fmt.Sprintf("%s event %s of run %s: %s", OrUnknown(string(e.EventType)), OrUnknown(e.EventID), OrUnknown(e.RunID), strings.Join(problems, "; ")),
		Meta: map[string]any{"eventType": e.EventType, "eventId": e.EventID, "problems": problems},
	}
}

// ValidateMetadata checks a run's metadata before a bootstrap.
func ValidateMetadata(m RunMetadata) error {
	var problems []string
	for _, f := range []struct{ name, v string }{
		{"runId", m.RunID}, {"tenantId", m.TenantID}, {"projectId", m.ProjectID},
		{"environmentId", m.EnvironmentID}, {"planId", m.PlanID}, {"planVersion", m.PlanVersion},
	} {
		switch {
		case f.v == "":
			problems = append(problems, f.name+" is missing")
		case strings.Contains(f.v, "|"):
			problems = append(problems, fmt.Sprintf("%s %q contains the reserved delimiter '|'", f.name, f.v))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return Errorf(CodeSchemaValidationFailed, "run metadata of %s: %s", OrUnknown(m.RunID), strings.Join(problems, "; "))
}

// OrUnknown shows an empty name as "(none)" in messages.
func OrUnknown(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// instance renders the event as the JSON value the schema sees, without a
// round trip through encoding/json for the envelope.
func instance(e RunEventWrite) (map[string]any, error) {
	m := map[string]any{
		"eventId":          e.EventID,
		"eventType":        string(e.EventType),
		"runId":            e.RunID,
		"tenantId":         e.TenantID,
		"projectId":        e.ProjectID,
		"environmentId":    e.EnvironmentID,
		"planId":           e.PlanID,
		"planVersion":      e.PlanVersion,
		"engineAttemptId":  json.Number(strconv.Itoa(e.EngineAttemptID)),
		"logicalAttemptId": json.Number(strconv.Itoa(e.LogicalAttemptID)),
		"idempotencyKey":   e.IdempotencyKey,
	}
	if !e.EmittedAt.IsZero() {
		m["emittedAt"] = e.EmittedAt.Format(time.RFC3339Nano)
	}
	for k, v := range m {
		if s, ok := v.(string); ok && s == "" {
			delete(m, k) // an empty field is a missing one
		}
	}
	if e.StepID != "" {
		m["stepId"] = e.StepID
	}
	if len(e.Payload) > 0 {
		if !payloadRules(e) {
			// The schema only asks for an object here: check that without
			// decoding the payload (the append path's hottest cost).
			trimmed := bytes.TrimSpace(e.Payload)
			switch {
			case bytes.Equal(trimmed, []byte("null")):
				return m, nil
			case !json.Valid(trimmed):
				return nil, fmt.Errorf("payload is not valid JSON")
			case trimmed[0] != '{':
				m["payload"] = []any{} // not an object: let the schema say so
				return m, nil
			}
			m["payload"] = map[string]any{}
			return m, nil
		}
		p, err := jsonschema.UnmarshalJSON(bytes.NewReader(e.Payload))
		if err != nil {
			return nil, fmt.Errorf("payload is not valid JSON: %v", err)
		}
		if p == nil {
			return m, nil // "payload": null is an absent payload
		}
		m["payload"] = p
	}
	return m, nil
}

// payloadRules reports whether the schema of e's type looks inside the
// payload.
func payloadRules(e RunEventWrite) bool {
	switch e.EventType {
	case StepFailed, RunFailed, StepSkipped, SignalAccepted, SignalRejected:
		return true
	case StepCompleted, RunCompleted, RunCancelled:
		return bytes.Contains(e.Payload, []byte(`"artifacts"`))
	case RunQueued:
		return bytes.Contains(e.Payload, []byte(`"selection"`)) || bytes.Contains(e.Payload, []byte(`"parentRunId"`)) ||
			bytes.Contains(e.Payload, []byte(`"fullRefresh"`)) || bytes.Contains(e.Payload, []byte(`"planRef"`)) ||
			bytes.Contains(e.Payload, []byte(`"vars"`)) || bytes.Contains(e.Payload, []byte(`"dataInterval"`))
	}
	return false
}

// SchemaProblems flattens a validation error into one sentence per failing
// leaf, e.g. "/payload: missing property 'error'".
func SchemaProblems(err error) []string {
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return []string{err.Error()}
	}
	seen := map[string]bool{}
	var out []string
	var walk func(v *jsonschema.ValidationError)
	walk = func(v *jsonschema.ValidationError) {
		if len(v.Causes) == 0 {
			loc := "/" + strings.Join(v.InstanceLocation, "/")
			if _, isNot := v.ErrorKind.(*kind.Not); isNot {
				return // the stepId rule; reported in words by Validate
			}
			msg := loc + ": " + v.ErrorKind.LocalizedString(printer)
			if !seen[msg] {
				seen[msg] = true
				out = append(out, msg)
			}
			return
		}
		for _, c := range v.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.Strings(out)
	return out
}
