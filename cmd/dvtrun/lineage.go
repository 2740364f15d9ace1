package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/config"
	"github.com/dvtrun/dvtrun/engine/delivery"
	"github.com/dvtrun/dvtrun/engine/lineage"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/store/snowflake"
)

// openLineageSink builds an openlineage sink: its API key is read here from
// the variable apiKeyEnv names, and registered for redaction.
func (c *cli) openLineageSink(cfg *config.Config, s *config.OpenLineageSink, st stateStore) (*delivery.OpenLineage, error) {
	naming, err := c.lineageNaming(c.g.warehouse)
	if err != nil {
		return nil, err
	}
	// A run started on a target built in that target's warehouse.
	targets := map[string]lineage.Naming{}
	for _, name := range cfg.TargetNames() {
		t, err := c.resolveTarget(cfg, name)
		if err != nil {
			return nil, err
		}
		if targets[name], err = c.lineageNaming(t.Warehouse); err != nil {
			return nil, fmt.Errorf("targets.%s.warehouse: %w", name, err)
		}
	}
	m, err := lineage.NewMapper(lineage.Options{Namespace: s.Namespace, Naming: naming, Targets: targets, Plans: storePlans{st}, EngineVersion: engineVersion()})
	if err != nil {
		return nil, err
	}
	token := ""
	if name := s.APIKeyEnv; name != "" {
		token = strings.TrimSpace(c.env(name))
		if token == "" {
			return nil, engine.Errorf(engine.CodeConfigInvalid, "openlineage.apiKeyEnv: the environment variable %s is empty or unset", name)
		}
		c.addSecret(token)
	}
	return delivery.NewOpenLineage(delivery.OpenLineageOptions{Mapper: m, URL: s.URL, Token: token, Timeout: s.Timeout, Path: s.Path})
}

// lineageNaming names the datasets of warehouse (a --warehouse URL) per
// OpenLineage's naming spec (SQLite is dvtrun's choice, see
// lineage.SQLiteNaming).
func (c *cli) lineageNaming(warehouse string) (lineage.Naming, error) {
	t, err := c.parseTarget("warehouse", warehouse)
	if err != nil {
		return lineage.Naming{}, err
	}
	switch t.kind {
	case "snowflake":
		cfg, err := snowflake.ConfigFromDSN(t.dsn)
		if err != nil {
			return lineage.Naming{}, err
		}
		schema := cfg.Schema
		if schema == "" {
			schema = "PUBLIC"
		}
		return lineage.SnowflakeNaming(cfg.Account, cfg.Database, schema), nil
	case "postgres":
		return postgresNaming(t.dsn)
	default:
		return lineage.SQLiteNaming(t.path), nil
	}
}

// postgresNaming reads host, port and database from a libpq URL or
// key=value DSN (as pgx does). A Unix socket directory is the local host.
func postgresNaming(dsn string) (lineage.Naming, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil || cfg.Database == "" {
		return lineage.Naming{}, engine.Errorf(engine.CodeInvalidArgument, "--warehouse: the Postgres DSN names no database, which OpenLineage's dataset names need")
	}
	host := cfg.Host
	if strings.HasPrefix(host, "/") {
		host = "localhost"
	}
	return lineage.PostgresNaming(host, int(cfg.Port), cfg.Database, searchSchema(searchPath(cfg.RuntimeParams))), nil
}

// optionsSearchPath finds search_path in libpq's options parameter.
var optionsSearchPath = regexp.MustCompile(`(?:-c\s*|--)search_path=(\S+)`)

// searchPath is the search_path a DSN sets, as a parameter of its own or
// in options ("-c search_path=…").
func searchPath(params map[string]string) string {
	if p := params["search_path"]; p != "" {
		return p
	}
	if m := optionsSearchPath.FindStringSubmatch(params["options"]); m != nil {
		return m[1]
	}
	return ""
}

// searchSchema is the schema unqualified relations are built in: the first
// of a DSN's search_path that is not "$user" (the warehouse builds in the
// session's current schema), else public.
func searchSchema(path string) string {
	for _, s := range strings.Split(path, ",") {
		s = strings.Trim(strings.TrimSpace(s), `"`)
		if s != "" && s != "$user" {
			return s
		}
	}
	return "public"
}

// storePlans reads a run's plan bundle from the state store.
type storePlans struct{ st stateStore }

func (p storePlans) RunBundle(ctx context.Context, runID string) (*plan.Bundle, string, bool, error) {
	meta, err := p.st.GetRun(ctx, runID)
	if err != nil {
		return nil, "", false, err
	}
	q, err := engine.RecordedRequest(ctx, p.st, meta)
	if err != nil {
		return nil, "", false, err
	}
	b, ok, err := storedBundle(ctx, p.st, q.PlanRef.SHA256, q.PlanRef.URI)
	return b, q.Target, ok, err
}

// engineVersion is the processing_engine facet's version: --version's
// text without the name (module version, VCS revision, Go version).
func engineVersion() string {
	return strings.TrimPrefix(version(), "dvtrun ")
}
