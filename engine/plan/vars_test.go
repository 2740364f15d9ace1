package plan

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

func TestParseVars(t *testing.T) {
	cases := []struct {
		in      string
		want    map[string]any
		wantErr string
	}{
		{"", nil, ""},
		{"  ", nil, ""},
		{`{"region": "eu", "days": 7, "ratio": 0.5, "full": true, "none": null}`, map[string]any{"region": "eu", "days": 7, "ratio": 0.5, "full": true, "none": nil}, ""},
		{"region: eu\ndays: 7", map[string]any{"region": "eu", "days": 7}, ""},
		{`{"nested": {"a": [1, 2]}}`, map[string]any{"nested": map[string]any{"a": []any{1, 2}}}, ""},
		{`[1, 2]`, nil, "must be a mapping"},
		{`just text`, nil, "must be a mapping"},
		{`{"a": `, nil, "is not YAML or JSON"},
		{`{"": 1}`, nil, "names are plain text"},
	}
	for _, tc := range cases {
		got, err := ParseVars(tc.in)
		if tc.wantErr != "" {
			if !errors.Is(err, engine.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseVars(%q) = %v, want INVALID_ARGUMENT saying %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseVars(%q) = %#v, %v; want %#v", tc.in, got, err, tc.want)
		}
	}
}
