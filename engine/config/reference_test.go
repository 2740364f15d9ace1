package config

import (
	"reflect"
	"strings"
	"testing"
)

// TestReference: every key of the file has a doc, the example the
// reference opens with is a valid file, and every key the example uses is
// in the reference.
func TestReference(t *testing.T) {
	var b strings.Builder
	if err := WriteReference(&b); err != nil {
		t.Fatal(err)
	}
	ref := b.String()
	if _, err := Parse([]byte(ReferenceExample), "dvtrun.yaml"); err != nil {
		t.Fatalf("the reference's example does not parse: %v", err)
	}
	for _, key := range []string{"`targets.NAME.store`", "`schedules[].cron`", "`sinks[].webhook.url`", "`stateStore.neverFailOpen`", "`limits.perPlan`", "`audit.retention`"} {
		if !strings.Contains(ref, key) {
			t.Errorf("the reference has no row %s", key)
		}
	}
}

// TestReferenceRefusesUndocumentedKeys: a key without a doc tag (or
// without a yaml key) stops the reference instead of leaving a hole.
func TestReferenceRefusesUndocumentedKeys(t *testing.T) {
	type sample struct {
		Documented string `yaml:"documented" doc:"Has one."`
		NoDoc      string `yaml:"noDoc"`
		NoKey      string `doc:"Has no key."`
	}
	typ := reflect.TypeOf(sample{})
	cases := []struct {
		field   string
		wantErr bool
	}{
		{"Documented", false},
		{"NoDoc", true},
		{"NoKey", true},
	}
	for _, tc := range cases {
		f, _ := typ.FieldByName(tc.field)
		_, _, err := fieldDoc(f)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: error %v, want error %v", tc.field, err, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: the error does not name the field: %v", tc.field, err)
		}
	}
}
