package plan

import (
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

// hostileSecret is a value no error may show.
const hostileSecret = "Pa'ss\"w\\ord\nX<&>y"

func TestCheckSecrets(t *testing.T) {
	p := &Plan{Steps: []Step{
		{ID: "model.a", Kind: KindModel},
		{ID: "model.b", Kind: KindModel, Secrets: []SecretRef{{Name: "TOKEN"}}},
		{ID: "sql.c", Kind: KindSQL, Secrets: []SecretRef{{Name: "TOKEN"}, {Name: "KEY"}}},
	}}
	has := func(names ...string) SecretLookup {
		return func(n string) (string, bool) {
			for _, x := range names {
				if x == n {
					return hostileSecret, true
				}
			}
			return "", false
		}
	}
	tests := []struct {
		name   string
		lookup SecretLookup
		want   []string // in the message; nil: no error
	}{
		{"all set", has("TOKEN", "KEY"), nil},
		{"one missing", has("TOKEN"), []string{"step sql.c needs secret KEY", "DVT_SECRET_KEY", "nothing was run or recorded"}},
		{"several missing", has(), []string{"step model.b needs secret TOKEN", "3 secrets are missing", "sql.c: KEY"}},
		{"no lookup", nil, []string{"step model.b needs secret TOKEN"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSecrets(p, tc.lookup)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if engine.CodeOf(err) != engine.CodeSecretNotFound {
				t.Fatalf("error %v, want %s", err, engine.CodeSecretNotFound)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), hostileSecret) {
				t.Errorf("the error shows a secret's value: %q", err)
			}
		})
	}
	if err := CheckSecrets(&Plan{Steps: []Step{{ID: "model.a", Kind: KindModel}}}, nil); err != nil {
		t.Errorf("a plan without secrets: %v", err)
	}
}
