package snowflake

import (
	"strings"
	"testing"
)

// TestJudgeGrants decides audit doctor's check from SHOW GRANTS ON TABLE
// rows, shaped as Snowflake documents them (privilege, granted_to ROLE,
// grantee_name): the test server does not implement SHOW GRANTS.
func TestJudgeGrants(t *testing.T) {
	events, seq, retention, genesis := auditTables[0], auditTables[5], auditTables[4], auditTables[1]
	cases := []struct {
		name   string
		table  guardedTable
		grants []grant
		ok     bool
		detail string
	}{
		{"select and insert only", events, []grant{{"SELECT", "ROLE", "DVTRUN_WRITER"}, {"INSERT", "ROLE", "DVTRUN_WRITER"}, {"OWNERSHIP", "ROLE", "DVTRUN_ADMIN"}}, true, "holds no"},
		{"owner", events, []grant{{"OWNERSHIP", "ROLE", "DVTRUN_WRITER"}}, false, "holds OWNERSHIP"},
		{"update and delete", events, []grant{{"SELECT", "ROLE", "dvtrun_writer"}, {"UPDATE", "ROLE", "dvtrun_writer"}, {"DELETE", "ROLE", "dvtrun_writer"}}, false, "holds UPDATE, DELETE"},
		{"another role's delete", events, []grant{{"DELETE", "ROLE", "SYSADMIN"}, {"TRUNCATE", "ROLE", "SYSADMIN"}}, true, "holds no"},
		{"a share, not a role", events, []grant{{"UPDATE", "SHARE", "DVTRUN_WRITER"}}, true, "holds no"},
		// dvt_run_seq: the append path's UPDATE is expected, DELETE is not.
		{"sequence rows: update is the append path's", seq, []grant{{"SELECT", "ROLE", "DVTRUN_WRITER"}, {"INSERT", "ROLE", "DVTRUN_WRITER"}, {"UPDATE", "ROLE", "DVTRUN_WRITER"}}, true, "UPDATE is the append path's"},
		{"sequence rows: delete", seq, []grant{{"UPDATE", "ROLE", "DVTRUN_WRITER"}, {"DELETE", "ROLE", "DVTRUN_WRITER"}}, false, "holds DELETE"},
		{"sequence rows: owner", seq, []grant{{"OWNERSHIP", "ROLE", "DVTRUN_WRITER"}}, false, "holds OWNERSHIP"},
		// dvt_audit_retention: INSERT (the retention path), nothing else.
		{"retention: insert only", retention, []grant{{"SELECT", "ROLE", "DVTRUN_WRITER"}, {"INSERT", "ROLE", "DVTRUN_WRITER"}}, true, "holds no"},
		{"retention: update", retention, []grant{{"INSERT", "ROLE", "DVTRUN_WRITER"}, {"UPDATE", "ROLE", "DVTRUN_WRITER"}}, false, "holds UPDATE"},
		// dvt_audit_genesis: only migration 0500 inserts.
		{"genesis: insert", genesis, []grant{{"SELECT", "ROLE", "DVTRUN_WRITER"}, {"INSERT", "ROLE", "DVTRUN_WRITER"}}, false, "holds INSERT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := judgeGrants(c.table, "DVTRUN_WRITER", c.grants)
			if g.OK != c.ok || !strings.Contains(g.Detail, c.detail) {
				t.Fatalf("%+v, want ok=%v and %q", g, c.ok, c.detail)
			}
		})
	}
}
