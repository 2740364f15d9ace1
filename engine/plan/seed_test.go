package plan

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/dvtrun/dvtrun/engine"
)

func TestReadSeed(t *testing.T) {
	tests := []struct {
		name  string
		csv   string
		cols  []string
		types []string
		rows  [][]any
	}{
		{
			name:  "LF, types inferred",
			csv:   "id,price,label\n1,2.5,a\n2,3,b\n",
			cols:  []string{"id", "price", "label"},
			types: []string{TypeInteger, TypeReal, TypeText},
			rows:  [][]any{{int64(1), 2.5, "a"}, {int64(2), 3.0, "b"}},
		},
		{
			name:  "CRLF, quoted comma, quote and newline",
			csv:   "id,note\r\n1,\"a, b\"\r\n2,\"say \"\"hi\"\"\"\r\n3,\"two\r\nlines\"\r\n",
			cols:  []string{"id", "note"},
			types: []string{TypeInteger, TypeText},
			rows:  [][]any{{int64(1), "a, b"}, {int64(2), `say "hi"`}, {int64(3), "two\nlines"}},
		},
		{
			name:  "BOM and padded header, empty fields are NULL",
			csv:   "\ufeff id , amount\n1,\n,4\n",
			cols:  []string{"id", "amount"},
			types: []string{TypeInteger, TypeInteger},
			rows:  [][]any{{int64(1), nil}, {nil, int64(4)}},
		},
		{
			name:  "no final newline, header only column of blanks is TEXT",
			csv:   "a,b\n1,\n2,",
			cols:  []string{"a", "b"},
			types: []string{TypeInteger, TypeText},
			rows:  [][]any{{int64(1), nil}, {int64(2), nil}},
		},
		{
			name:  "NaN, Inf, hex and underscores are text; exponents are REAL",
			csv:   "a,b,c,d,e\nNaN,Inf,0x10,1_000,1e3\n",
			cols:  []string{"a", "b", "c", "d", "e"},
			types: []string{TypeText, TypeText, TypeText, TypeText, TypeReal},
			rows:  [][]any{{"NaN", "Inf", "0x10", "1_000", 1000.0}},
		},
		{
			name:  "int64 overflow keeps the digits as text",
			csv:   "big\n99999999999999999999\n",
			cols:  []string{"big"},
			types: []string{TypeText},
			rows:  [][]any{{"99999999999999999999"}},
		},
		{
			name:  "mixed int and text is TEXT, values kept verbatim",
			csv:   "code\n007\nA7\n",
			cols:  []string{"code"},
			types: []string{TypeText},
			rows:  [][]any{{"007"}, {"A7"}},
		},
		{
			name:  "header only",
			csv:   "x,y\n",
			cols:  []string{"x", "y"},
			types: []string{TypeText, TypeText},
			rows:  [][]any{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadSeed(strings.NewReader(tc.csv), "s.csv")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Columns, tc.cols) || !reflect.DeepEqual(got.Types, tc.types) {
				t.Errorf("columns %v %v, want %v %v", got.Columns, got.Types, tc.cols, tc.types)
			}
			if !reflect.DeepEqual(got.Rows, tc.rows) {
				t.Errorf("rows %#v, want %#v", got.Rows, tc.rows)
			}
		})
	}
}

func TestReadSeedErrors(t *testing.T) {
	tests := []struct {
		name string
		csv  string
		want string // substring of the message: file:line and the cause
	}{
		{"empty", "", "seed s.csv is empty"},
		{"blank lines only", "\n\n", "seed s.csv is empty"},
		{"too few fields", "a,b\n1,2\n3\n", "s.csv:3: the row has 1 fields, the header 2"},
		{"too many fields after CRLF", "a,b\r\n1,2\r\n3,4\r\n5,6,7\r\n", "s.csv:4: the row has 3 fields"},
		{"field count names the first line of a multi-line record", "a,b\n\"x\ny\"\n", "s.csv:2: the row has 1 fields"},
		{"bare quote", "a,b\n1,x\"y\n", "s.csv:2:"},
		{"unterminated quote", "a,b\n1,2\n3,\"oops\n", "s.csv:3:"},
		{"empty column name", "a,,c\n1,2,3\n", "s.csv:1: column 2 has no name"},
		{"header after blank lines", "\n\nx,\n1,2\n", "s.csv:3: column 2 has no name"},
		{"duplicate column, any case", "Id,name,ID\n", `s.csv:1: column "ID" appears twice`},
		{"control character in a column name", "id,na\x01me\n1,2\n", `s.csv:1: column "na\x01me" contains a control or invalid character`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadSeed(strings.NewReader(tc.csv), "s.csv")
			if err == nil {
				t.Fatal("no error")
			}
			if engine.CodeOf(err) != engine.CodePlanInvalid {
				t.Errorf("code %q, want %s", engine.CodeOf(err), engine.CodePlanInvalid)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestReadSeedReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	_, err := ReadSeed(iotest.ErrReader(boom), "s.csv")
	if !errors.Is(err, boom) || engine.CodeOf(err) != engine.CodePlanInvalid || !strings.Contains(err.Error(), "s.csv") {
		t.Fatalf("got %v", err)
	}
}
