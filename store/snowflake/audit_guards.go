package snowflake

import (
	"context"
	"fmt"
	"strings"

	"github.com/dvtrun/dvtrun/engine/audit"
)

// auditTables are the append-only tables and the statement listing each
// one's grants (audit.sql).
var auditTables = [][2]string{
	{"dvt_run_events", "audit_grants_events"},
	{"dvt_audit_genesis", "audit_grants_genesis"},
	{"dvt_audit_log", "audit_grants_log"},
	{"dvt_audit_checkpoints", "audit_grants_checkpoints"},
}

// grant is one row of SHOW GRANTS ON TABLE.
type grant struct{ privilege, grantedTo, grantee string }

// AuditGuards reports what the current role may do to the append-only
// tables (audit doctor). Snowflake has no triggers and a table's owner can
// always UPDATE and DELETE it, so the role dvtrun connects as should hold
// SELECT and INSERT only, with OWNERSHIP on another role (README
// "Tamper-evident log"). SHOW GRANTS lists the grants to roles directly:
// privileges the current role inherits from a role granted to it are not
// followed, and say so.
func (s *Store) AuditGuards(ctx context.Context) ([]audit.Guard, error) {
	var role string
	if err := s.db.QueryRowContext(ctx, s.auditQ("audit_current_role")).Scan(&role); err != nil {
		return nil, s.classify("audit doctor", err)
	}
	var out []audit.Guard
	for _, t := range auditTables {
		gs, err := s.showGrants(ctx, s.auditQ(t[1]))
		if err != nil {
			return nil, err
		}
		out = append(out, judgeGrants(t[0], role, gs))
	}
	return out, nil
}

func (s *Store) auditQ(name string) string { return s.aq[name] }

// showGrants reads SHOW GRANTS' privilege, granted_to and grantee_name
// columns by name.
func (s *Store) showGrants(ctx context.Context, q string) ([]grant, error) {
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, s.classify("audit doctor", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, s.classify("audit doctor", err)
	}
	idx := map[string]int{}
	for i, c := range cols {
		idx[strings.ToLower(c)] = i
	}
	for _, c := range []string{"privilege", "granted_to", "grantee_name"} {
		if _, ok := idx[c]; !ok {
			return nil, fmt.Errorf("snowflake: SHOW GRANTS has no column %s", c)
		}
	}
	var out []grant
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, s.classify("audit doctor", err)
		}
		str := func(c string) string { return fmt.Sprint(vals[idx[c]]) }
		out = append(out, grant{privilege: str("privilege"), grantedTo: str("granted_to"), grantee: str("grantee_name")})
	}
	return out, s.classify("audit doctor", rows.Err())
}

// judgeGrants decides one table's check: the current role must hold none
// of OWNERSHIP, UPDATE, DELETE and TRUNCATE on it.
func judgeGrants(table, role string, grants []grant) audit.Guard {
	var held []string
	for _, g := range grants {
		if !strings.EqualFold(g.grantedTo, "ROLE") || !strings.EqualFold(g.grantee, role) {
			continue
		}
		switch p := strings.ToUpper(g.privilege); p {
		case "OWNERSHIP", "UPDATE", "DELETE", "TRUNCATE":
			held = append(held, p)
		}
	}
	g := audit.Guard{Check: "grants on " + table, OK: len(held) == 0,
		Detail: fmt.Sprintf("role %s holds no OWNERSHIP, UPDATE, DELETE or TRUNCATE directly (inherited roles not followed)", role)}
	if len(held) > 0 {
		g.Detail = fmt.Sprintf("role %s holds %s: it can rewrite the log (the chain detects it; grant SELECT, INSERT only)", role, strings.Join(held, ", "))
	}
	return g
}
