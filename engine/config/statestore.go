package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// StateStore is ExecutionSemantics §5's write model:
//
//	stateStore:
//	  writeLatencyBudgetMs: 3000
//	  spoolDir: /var/lib/dvtrun/spool
//	  failOpenForEventClass: [StepStarted]
//	  neverFailOpen: [StepCompleted, StepFailed]
//
// The two policy keys are accepted only with exactly those values: the
// runner implements that policy and no other, so a file asking for another
// is refused rather than silently not followed.
type StateStore struct {
	WriteLatencyBudgetMs int    `yaml:"writeLatencyBudgetMs" doc:"How long an event may wait to be stored, in milliseconds, 100 to 3600000 (default 3000, as --write-budget)."`
	SpoolDir             string `yaml:"spoolDir" doc:"Where StepStarted events that waited longer are kept until they are stored (default: spool/ next to the runs' artifacts), relative to this file; put it on another disk than the store's."`
	// The two policy keys: accepted with exactly these values only.
	FailOpenForEventClass []string `yaml:"failOpenForEventClass" doc:"The events a run does not wait for beyond the budget but spools: only [StepStarted] is accepted, the one policy dvtrun implements."`
	NeverFailOpen         []string `yaml:"neverFailOpen" doc:"The events a run always waits for: only [StepCompleted, StepFailed] is accepted."`
}

// WriteBudgetMin and WriteBudgetMax bound the write-latency budget, here
// and in the CLI's --write-budget: below 100ms no remote store answers in
// time (and "3" meant as seconds is caught); above an hour a run has lost
// its lease long before.
const (
	WriteBudgetMin = 100 * time.Millisecond
	WriteBudgetMax = time.Hour
)

// The policy of ExecutionSemantics §5 the runner implements.
var (
	failOpenClasses  = []string{"StepStarted"}
	neverOpenClasses = []string{"StepCompleted", "StepFailed"}
)

// WriteBudget is WriteLatencyBudgetMs as a duration; 0 when unset.
func (s StateStore) WriteBudget() time.Duration {
	return time.Duration(s.WriteLatencyBudgetMs) * time.Millisecond
}

// UnmarshalYAML reads the section key by key, so that every error (a
// wrong type included, which yaml reports by line only) names its key and
// unknown keys are refused as elsewhere in the file.
func (s *StateStore) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return keyError("stateStore", "want a mapping of writeLatencyBudgetMs, spoolDir, failOpenForEventClass and neverFailOpen")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := "stateStore." + k.Value
		if seen[k.Value] {
			return keyError(key, "is set twice")
		}
		seen[k.Value] = true
		switch k.Value {
		case "writeLatencyBudgetMs":
			var ms int64
			if v.ShortTag() != "!!int" || v.Decode(&ms) != nil {
				return keyError(key, "%s is not a whole number of milliseconds", quoteNode(v))
			}
			if ms < WriteBudgetMin.Milliseconds() || ms > WriteBudgetMax.Milliseconds() {
				return keyError(key, "%d is not between %d and %d (milliseconds)", ms, WriteBudgetMin.Milliseconds(), WriteBudgetMax.Milliseconds())
			}
			s.WriteLatencyBudgetMs = int(ms)
		case "spoolDir":
			if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" || v.Value == "" {
				return keyError(key, "want a directory path, not %s", quoteNode(v))
			}
			s.SpoolDir = v.Value
		case "failOpenForEventClass":
			if err := policy(key, v, failOpenClasses, "fails open (spools) for"); err != nil {
				return err
			}
			s.FailOpenForEventClass = slices.Clone(failOpenClasses)
		case "neverFailOpen":
			if err := policy(key, v, neverOpenClasses, "never fails open for"); err != nil {
				return err
			}
			s.NeverFailOpen = slices.Clone(neverOpenClasses)
		default:
			return keyError(key, "unknown key (want writeLatencyBudgetMs, spoolDir, failOpenForEventClass or neverFailOpen)")
		}
	}
	return nil
}

// policy accepts v only when it lists exactly want, in any order.
func policy(key string, v *yaml.Node, want []string, does string) error {
	var got []string
	ok := v.Kind == yaml.SequenceNode && v.Decode(&got) == nil
	if ok {
		sorted := slices.Sorted(slices.Values(got))
		ok = slices.Equal(sorted, want)
	}
	if !ok {
		return keyError(key, "dvtrun %s exactly [%s] (ExecutionSemantics §5) and implements no other policy; got %s",
			does, strings.Join(want, ", "), quoteNode(v))
	}
	return nil
}

// quoteNode shows a value in an error: quoted, on one line, at most 60
// bytes of it.
func quoteNode(v *yaml.Node) string {
	text := v.Value
	if v.Kind != yaml.ScalarNode {
		b, err := yaml.Marshal(v)
		if err != nil {
			return "a " + v.ShortTag()
		}
		text = strings.TrimSpace(string(b))
	}
	if len(text) > 60 {
		return fmt.Sprintf("%q…", text[:60])
	}
	return fmt.Sprintf("%q", text)
}
