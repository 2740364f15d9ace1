package snowflake

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dvtrun/dvtrun/engine/audit"
)

// guardedTable is an append-only table, the statement listing its grants
// (audit.sql), the privileges dvtrun's role must not hold on it, and what
// the role's remaining write privilege is for.
type guardedTable struct {
	table, query string
	forbidden    []string
	note         string
}

// noRewrite is what no role dvtrun connects as may hold on an append-only
// table: its owner, or UPDATE, DELETE, TRUNCATE, can rewrite it.
var noRewrite = []string{"OWNERSHIP", "UPDATE", "DELETE", "TRUNCATE"}

// auditTables are the append-only tables (migrations 0500, 0550, 0810).
// dvt_run_seq and dvt_runs: the append path UPDATEs them (next_seq,
// status, last_hash; provider_run_ref), which Snowflake cannot narrow to
// columns; verify's structure checks are what catch an edit there.
// dvt_audit_genesis: only migration 0500 inserts, so no INSERT either.
var auditTables = []guardedTable{
	{"dvt_run_events", "audit_grants_events", noRewrite, ""},
	{"dvt_audit_genesis", "audit_grants_genesis", append([]string{"INSERT"}, noRewrite...), ""},
	{"dvt_audit_log", "audit_grants_log", noRewrite, ""},
	{"dvt_audit_checkpoints", "audit_grants_checkpoints", noRewrite, ""},
	{"dvt_audit_retention", "audit_grants_retention", noRewrite, " (INSERT is the retention path's)"},
	{"dvt_run_seq", "audit_grants_run_seq", []string{"OWNERSHIP", "DELETE", "TRUNCATE"}, " (UPDATE is the append path's and cannot be narrowed to its columns here)"},
	{"dvt_runs", "audit_grants_runs", []string{"OWNERSHIP", "DELETE", "TRUNCATE"}, " (UPDATE is the append path's: provider_run_ref)"},
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
		gs, err := s.showGrants(ctx, s.auditQ(t.query))
		if err != nil {
			return nil, err
		}
		out = append(out, judgeGrants(t, role, gs))
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
// of the table's forbidden privileges directly.
func judgeGrants(t guardedTable, role string, grants []grant) audit.Guard {
	var held []string
	for _, g := range grants {
		if !strings.EqualFold(g.grantedTo, "ROLE") || !strings.EqualFold(g.grantee, role) {
			continue
		}
		p := strings.ToUpper(g.privilege)
		if slices.Contains(t.forbidden, p) && !slices.Contains(held, p) {
			held = append(held, p)
		}
	}
	g := audit.Guard{Check: "grants on " + t.table, OK: len(held) == 0,
		Detail: fmt.Sprintf("role %s holds no %s directly (inherited roles not followed)%s", role, orList(t.forbidden), t.note)}
	if len(held) > 0 {
		g.Detail = fmt.Sprintf("role %s holds %s: it can rewrite %s (verify detects it; revoke them)%s", role, strings.Join(held, ", "), t.table, t.note)
	}
	return g
}

// orList writes a, b or c.
func orList(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}
