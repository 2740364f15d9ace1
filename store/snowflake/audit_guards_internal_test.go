package snowflake

import (
	"strings"
	"testing"
)

// TestJudgeGrants decides audit doctor's check from SHOW GRANTS ON TABLE
// rows, shaped as Snowflake documents them (privilege, granted_to ROLE,
// grantee_name): the test server does not implement SHOW GRANTS.
func TestJudgeGrants(t *testing.T) {
	cases := []struct {
		name   string
		grants []grant
		ok     bool
		detail string
	}{
		{"select and insert only", []grant{{"SELECT", "ROLE", "DVTRUN_WRITER"}, {"INSERT", "ROLE", "DVTRUN_WRITER"}, {"OWNERSHIP", "ROLE", "DVTRUN_ADMIN"}}, true, "holds no"},
		{"owner", []grant{{"OWNERSHIP", "ROLE", "DVTRUN_WRITER"}}, false, "holds OWNERSHIP"},
		{"update and delete", []grant{{"SELECT", "ROLE", "dvtrun_writer"}, {"UPDATE", "ROLE", "dvtrun_writer"}, {"DELETE", "ROLE", "dvtrun_writer"}}, false, "holds UPDATE, DELETE"},
		{"another role's delete", []grant{{"DELETE", "ROLE", "SYSADMIN"}, {"TRUNCATE", "ROLE", "SYSADMIN"}}, true, "holds no"},
		{"a share, not a role", []grant{{"UPDATE", "SHARE", "DVTRUN_WRITER"}}, true, "holds no"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := judgeGrants("dvt_run_events", "DVTRUN_WRITER", c.grants)
			if g.OK != c.ok || !strings.Contains(g.Detail, c.detail) {
				t.Fatalf("%+v, want ok=%v and %q", g, c.ok, c.detail)
			}
		})
	}
}
