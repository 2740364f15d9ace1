package config

import (
	"strings"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

func TestParseTargets(t *testing.T) {
	c, err := Parse([]byte(`
target: dev
targets:
  dev:  {store: "sqlite:.dvt/state.db", warehouse: "sqlite:.dvt/warehouse.db", environment: development}
  prod: {store: "snowflake://u:p@acct/DB/SCH?warehouse=WH", warehouse: "snowflake://u:p@acct?database=ANALYTICS&schema=PROD", threads: 8}
schedules:
  - {name: shop-nightly, cron: "0 3 * * *", timezone: UTC, plan: shop/plan.yaml, target: prod, select: "tag:nightly", exclude: "stg_x", vars: {region: eu, days: 7}, fullRefresh: true}
`), "conf/dvtrun.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Target != "dev" || len(c.Targets) != 2 {
		t.Fatalf("targets = %q, %+v", c.Target, c.Targets)
	}
	if d := c.Targets["dev"]; d.Environment != "development" || d.Threads != 0 {
		t.Errorf("dev = %+v", d)
	}
	if p := c.Targets["prod"]; p.Environment != "prod" || p.Threads != 8 {
		t.Errorf("prod = %+v (the environment defaults to the target's name)", p)
	}
	s := c.Schedules[0]
	if s.Target != "prod" || s.Select != "tag:nightly" || s.Exclude != "stg_x" || !s.FullRefresh || s.Vars["region"] != "eu" || s.Vars["days"] != 7 {
		t.Errorf("schedule = %+v", s)
	}
	if got := strings.Join(c.TargetNames(), ","); got != "dev,prod" {
		t.Errorf("names = %s", got)
	}
}

func TestTargetErrorsNameTheKey(t *testing.T) {
	dev := `dev: {store: "sqlite:s.db", warehouse: "sqlite:dev.db"}`
	cases := []struct{ name, text, want string }{
		{"no warehouse", "targets: {dev: {store: 'sqlite:s.db'}}", "targets.dev.warehouse: is required"},
		{"no store", "targets: {dev: {warehouse: 'sqlite:w.db'}}", "targets.dev.store: is required"},
		{"empty target", "targets: {dev: }", "targets.dev: want a mapping"},
		{"unknown key", "targets: {dev: {store: a, warehouse: b, schema: c}}", "field schema not found"},
		{"bad name", "targets: {'a b': {store: a, warehouse: b}}", `targets.a b: "a b"`},
		{"negative threads", "targets: {dev: {store: a, warehouse: b, threads: -1}}", "targets.dev.threads"},
		{"bad environment", "targets: {dev: {store: a, warehouse: b, environment: 'x|y'}}", "targets.dev.environment"},
		{"default without targets", "target: dev", `target: "dev" names no target`},
		{"unknown default", "target: qa\ntargets: {" + dev + "}", `target: "qa" is not one of the targets (dev)`},
		{"same sqlite file", "targets: {" + dev + ", prod: {store: 'sqlite:s.db', warehouse: 'sqlite:./sub/../dev.db'}}", "targets.prod.warehouse: is the warehouse of target dev too"},
		{"same snowflake schema", `targets: {dev: {store: a, warehouse: "snowflake://u:p@acct/ANALYTICS/PROD"}, prod: {store: a, warehouse: "snowflake://v:q@acct?database=analytics&schema=prod&role=R"}}`,
			"targets.prod.warehouse: is the warehouse of target dev too"},
		{"schedule target unknown", "targets: {" + dev + "}\nschedules: [{name: a, cron: '@daily', plan: p.yaml, target: prod}]", `schedules[0].target: "prod" is not one of the targets (dev)`},
		{"schedule target without targets", "schedules: [{name: a, cron: '@daily', plan: p.yaml, target: prod}]", `schedules[0].target: "prod" names no target`},
		{"schedule vars not a map", "schedules: [{name: a, cron: '@daily', plan: p.yaml, vars: [1]}]", "line 1: cannot unmarshal !!seq"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.text), "dvt.yaml")
			if engine.CodeOf(err) != engine.CodeConfigInvalid || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want CONFIG_INVALID with %q", err, tc.want)
			}
		})
	}
}

func TestDistinctWarehousesAreAccepted(t *testing.T) {
	// Same account and database, another schema: another warehouse.
	_, err := Parse([]byte(`targets:
  dev:  {store: a, warehouse: "snowflake://u:p@acct/ANALYTICS/DEV"}
  prod: {store: a, warehouse: "snowflake://u:p@acct/ANALYTICS/PROD"}
  local: {store: a, warehouse: "sqlite:w.db"}
  other: {store: a, warehouse: "sqlite:sub/w.db"}
`), "dvt.yaml")
	if err != nil {
		t.Fatal(err)
	}
}
