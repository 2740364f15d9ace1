package config

import (
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
)

// Target is where a run happens, as a dbt profile's output: its state
// store, its warehouse, the environment id its runs are recorded under and
// the default number of threads.
//
//	target: dev
//	targets:
//	  dev:  {store: "sqlite:.dvt/state.db", warehouse: "sqlite:.dvt/warehouse.db", environment: dev}
//	  prod: {store: "snowflake://…", warehouse: "snowflake://…&schema=PROD", threads: 8}
//	  tmp:  {store: …, warehouse: …, engine: temporal, temporal: {address: 127.0.0.1:7233, taskQueue: dvtrun}}
//
// SQLite paths are relative to the configuration file (the CLI resolves
// them, as it does schedules' plans).
type Target struct {
	Store       string    `yaml:"store" doc:"State store URL: sqlite:PATH, postgres://… or snowflake://…. A relative SQLite path is read from this file's directory. Required."`
	Warehouse   string    `yaml:"warehouse" doc:"Warehouse URL, in the same forms as store. Each target needs its own warehouse: two targets never share one. Required."`
	Environment string    `yaml:"environment" doc:"Environment id the target's runs are recorded under (default: the target's name)."`
	Threads     int       `yaml:"threads" doc:"Default of --threads for runs on this target (0: the CLI's default)."`
	Engine      string    `yaml:"engine" doc:"What executes the target's runs: local (default, in the dvtrun process) or temporal."`
	Temporal    *Temporal `yaml:"temporal" doc:"This target's Temporal server and task queue (default: the top-level temporal block)."`
}

// TargetNames lists the configured targets, sorted.
func (c *Config) TargetNames() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for n := range c.Targets {
			if !yield(n) {
				return
			}
		}
	})
}

// validateTargets checks targets and the default target. file is the
// configuration file's name: two targets are compared by where their
// warehouses really are, relative paths read from the file's directory.
func (c *Config) validateTargets(file string) error {
	if len(c.Targets) == 0 {
		if c.Target != "" {
			return keyError("target", "%q names no target: the file has no targets section", c.Target)
		}
		return nil
	}
	owner := map[string]string{} // warehouse identity -> target
	for _, name := range c.TargetNames() {
		t := c.Targets[name]
		key := "targets." + name
		switch {
		case !scheduleName.MatchString(name):
			return keyError(key, "%q: use letters, digits, '_', '.' and '-' (at most 128)", name)
		case t == nil:
			return keyError(key, "want a mapping of store, warehouse, environment, threads, engine and temporal")
		case t.Store == "":
			return keyError(key+".store", "is required")
		case t.Warehouse == "":
			// Dev and prod never share a warehouse by accident: nothing
			// falls back to the flags' or the environment's warehouse.
			return keyError(key+".warehouse", "is required (each target names its own warehouse)")
		case t.Threads < 0:
			return keyError(key+".threads", "must be at least 1 (or left out)")
		case t.Engine != "" && t.Engine != EngineLocal && t.Engine != EngineTemporal:
			return keyError(key+".engine", "%q: want local or temporal", t.Engine)
		}
		if t.Temporal != nil {
			if err := t.Temporal.validate(key + ".temporal"); err != nil {
				return err
			}
		}
		if t.Environment == "" {
			t.Environment = name
		} else if !scheduleName.MatchString(t.Environment) {
			return keyError(key+".environment", "%q: use letters, digits, '_', '.' and '-' (at most 128)", t.Environment)
		}
		id := warehouseIdentity(file, t.Warehouse)
		if other, ok := owner[id]; ok {
			return keyError(key+".warehouse", "is the warehouse of target %s too: each target needs its own", other)
		}
		owner[id] = name
	}
	if c.Target != "" && c.Targets[c.Target] == nil {
		return keyError("target", "%q is not one of the targets (%s)", c.Target, strings.Join(c.TargetNames(), ", "))
	}
	return nil
}

// warehouseIdentity is what makes two warehouse URLs the same warehouse:
// for SQLite the file (relative paths from the configuration file's
// directory), for Snowflake the account, database and schema (unquoted
// identifiers compare case-insensitively, as in Snowflake), the
// credentials and other parameters left out.
func warehouseIdentity(file, raw string) string {
	if dsn, ok := strings.CutPrefix(raw, "snowflake://"); ok {
		if i := strings.LastIndex(dsn, "@"); i >= 0 {
			dsn = dsn[i+1:]
		}
		path, query, _ := strings.Cut(dsn, "?")
		parts := strings.SplitN(path, "/", 3)
		for len(parts) < 3 {
			parts = append(parts, "")
		}
		if q, err := url.ParseQuery(query); err == nil {
			if v := q.Get("database"); v != "" {
				parts[1] = v
			}
			if v := q.Get("schema"); v != "" {
				parts[2] = v
			}
		}
		return "snowflake:" + strings.ToUpper(strings.Join(parts, "/"))
	}
	if strings.Contains(raw, "://") && !strings.HasPrefix(raw, "sqlite://") {
		return raw
	}
	p := strings.TrimPrefix(strings.TrimPrefix(raw, "sqlite://"), "sqlite:")
	if !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(file), p)
	}
	return "sqlite:" + filepath.Clean(p)
}

// validateScheduleShape checks what a schedule says about its runs beyond
// its plan: the target must be configured.
func (c *Config) validateScheduleShape() error {
	for i, s := range c.Schedules {
		key := fmt.Sprintf("schedules[%d]", i)
		if s.Target != "" && c.Targets[s.Target] == nil {
			if len(c.Targets) == 0 {
				return keyError(key+".target", "%q names no target: the file has no targets section", s.Target)
			}
			return keyError(key+".target", "%q is not one of the targets (%s)", s.Target, strings.Join(c.TargetNames(), ", "))
		}
	}
	return nil
}
