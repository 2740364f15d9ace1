package plan

import (
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/dvtrun/dvtrun/engine"
)

// ParseVars reads --vars, dbt's flag: a YAML or JSON mapping of names to
// values ('{"region": "eu", "days": 7}' or 'region: eu'). "" is no vars.
// Values keep their YAML types (strings, numbers, booleans, null; lists and
// objects are accepted here and refused by the renderer where a template
// uses one). The error is INVALID_ARGUMENT.
func ParseVars(s string) (map[string]any, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "--vars is not YAML or JSON: %v", strings.ReplaceAll(err.Error(), "\n", " "))
	}
	m, ok := normalizeYAML(v).(map[string]any)
	if !ok {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "--vars must be a mapping of names to values, like '{\"region\": \"eu\"}'")
	}
	for k := range m {
		if strings.TrimSpace(k) == "" || engine.HasControl(k) {
			return nil, engine.Errorf(engine.CodeInvalidArgument, "--vars has a var named %s; names are plain text", engine.QuoteText(k))
		}
	}
	return m, nil
}
