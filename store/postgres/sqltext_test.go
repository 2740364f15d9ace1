package postgres

import (
	"slices"
	"testing"
)

func TestStatementsAndPlaceholders(t *testing.T) {
	tests := []struct {
		name  string
		sql   string
		stmts []string
		first string // the first statement, numbered
		n     int
	}{
		{"one", "select ?", []string{"select ?"}, "select $1", 1},
		{"blank and comment pieces drop", "select 1;; -- c\n; /* x; */", []string{"select 1"}, "select 1", 0},
		{"quotes hide ; and ?", "insert into t values ('a;?', \"b;?\", ?); select 2", []string{"insert into t values ('a;?', \"b;?\", ?)", "select 2"}, "insert into t values ('a;?', \"b;?\", $1)", 1},
		{"doubled quotes", "select 'it''s;?', ?", []string{"select 'it''s;?', ?"}, "select 'it''s;?', $1", 1},
		{"E string backslash", `select E'\';?', ?`, []string{`select E'\';?', ?`}, `select E'\';?', $1`, 1},
		{"dollar quoting", "create function f() returns int as $body$ select 1; select ?; $body$ language sql; select ?", []string{"create function f() returns int as $body$ select 1; select ?; $body$ language sql", "select ?"}, "create function f() returns int as $body$ select 1; select ?; $body$ language sql", 0},
		{"nested comments", "select /* a /* b; */ ?; */ ?", []string{"select /* a /* b; */ ?; */ ?"}, "select /* a /* b; */ ?; */ $1", 1},
		{"parameter $1 is not a dollar quote", "select $1, ?", []string{"select $1, ?"}, "select $1, $1", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := statements(tc.sql)
			if !slices.Equal(got, tc.stmts) {
				t.Fatalf("statements %q, want %q", got, tc.stmts)
			}
			text, n := numberPlaceholders(got[0])
			if text != tc.first || n != tc.n {
				t.Errorf("numbered %q (%d), want %q (%d)", text, n, tc.first, tc.n)
			}
		})
	}
}
