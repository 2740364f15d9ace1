package plan

import "testing"

func TestSingleStatement(t *testing.T) {
	tests := []struct {
		in, want string
		err      bool
	}{
		{"select 1", "select 1", false},
		{"  select 1 ;  \n", "select 1", false},
		{"select 1; /* done */ -- really\n;", "select 1", false},
		{"select ';', \"a;b\", `c;d`, [e;f] from t", "select ';', \"a;b\", `c;d`, [e;f] from t", false},
		{"select 'it''s; fine'", "select 'it''s; fine'", false},
		{"select 1 -- ; not a split\nfrom t", "select 1 -- ; not a split\nfrom t", false},
		{"select 1; select 2", "", true},
		{"  ;  ", "", true},
		{"-- only a comment", "", true},
	}
	for _, tc := range tests {
		got, err := SingleStatement(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("SingleStatement(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestTransactionControl(t *testing.T) {
	tests := []struct{ sql, want string }{
		{"delete from t; insert into t values (1)", ""},
		{"delete from t; COMMIT; insert into t values (1)", "COMMIT"},
		{"rollback", "rollback"},
		{"savepoint a; delete from t; release a", "savepoint a"},
		{"select 'commit;'; select \"end\"", ""},
		{"-- commit\nselect 1", ""},
		{"create trigger tr after insert on t begin insert into u values (1); delete from v; end; delete from t", ""},
		{"create temp trigger tr after insert on t begin select 1; end; end", "end"},
	}
	for _, tc := range tests {
		if got := TransactionControl(tc.sql); got != tc.want {
			t.Errorf("TransactionControl(%q) = %q, want %q", tc.sql, got, tc.want)
		}
	}
}
