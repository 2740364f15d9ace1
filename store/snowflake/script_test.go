package snowflake

import (
	"encoding/hex"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestRenderedValuesCannotEscape: whatever a value holds, its rendered form
// is a quoted run of hex digits, so it cannot end its literal. (The round
// trip through the driver and server is TestHostilePayloadRoundTrip.)
func TestRenderedValuesCannotEscape(t *testing.T) {
	lit := regexp.MustCompile(`^'[0-9a-f]*'$`)
	for _, v := range []string{"", "plain", "it's", `back\slash`, "$$ x $$", "a;b", "-- c", "/* c */", "l1\nl2\r\n", "ünï ✓", "\x00"} {
		got := hexLit(v)
		if !lit.MatchString(got) {
			t.Fatalf("hexLit(%q) = %s, not a quoted hex literal", v, got)
		}
		back, err := hex.DecodeString(strings.Trim(got, "'"))
		if err != nil || string(back) != v {
			t.Fatalf("hexLit(%q) decodes to %q (%v)", v, back, err)
		}
	}
	if hexOrNull("") != "NULL" || hexOrNull("a") != "'61'" {
		t.Fatalf("hexOrNull: %s %s", hexOrNull(""), hexOrNull("a"))
	}
}

func TestRender(t *testing.T) {
	cases := []struct {
		name    string
		stmt    string
		vals    map[string]string
		rows    [][]string
		want    string
		wantErr bool
	}{
		{name: "slots", stmt: "X /*:a*/ Y /*:b*/ /*:a*/", vals: map[string]string{"a": "'61'", "b": "3"}, want: "X '61' Y 3 '61'"},
		{name: "rows", stmt: "VALUES /*rows*/;", rows: [][]string{{"'61'", "1"}, {"NULL", "2"}}, want: "VALUES ('61', 1), (NULL, 2);"},
		{name: "digits in a slot name", stmt: "X /*:sha256*/", vals: map[string]string{"sha256": "'61'"}, want: "X '61'"},
		{name: "malformed slot", stmt: "X /*:Bad-Name*/", vals: map[string]string{}, wantErr: true},
		{name: "missing slot", stmt: "X /*:a*/", vals: map[string]string{}, wantErr: true},
		{name: "rows needed", stmt: "VALUES /*rows*/", wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := render(c.stmt, c.vals, c.rows)
			if (err != nil) != c.wantErr || got != c.want {
				t.Fatalf("render = %q, %v; want %q (error %v)", got, err, c.want, c.wantErr)
			}
		})
	}
}

func TestSplitStatements(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"SELECT 1", []string{"SELECT 1"}},
		{"SELECT 1;\n\nSELECT 2;\n", []string{"SELECT 1", "SELECT 2"}},
		{"-- a; comment\nSELECT 'a;b'; SELECT 2", []string{"SELECT 'a;b'", "SELECT 2"}},
		{"SELECT /* ; */ 1;", []string{"SELECT /* ; */ 1"}},
		{"SELECT 'it''s; fine'", []string{"SELECT 'it''s; fine'"}},
		{" ;; ", nil},
	}
	for _, c := range cases {
		if got := splitStatements(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("splitStatements(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
