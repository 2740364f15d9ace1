package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/wake"
	"github.com/dvtrun/dvtrun/store"
	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// target is a parsed --store or --warehouse URL.
type target struct {
	kind string // "sqlite", "snowflake" or "postgres"
	path string // sqlite: the database file
	dsn  string // snowflake: a gosnowflake DSN; postgres: a libpq URL or key=value DSN (may hold a password: never print it)
}

// parseTarget reads sqlite:PATH, sqlite://PATH, a bare file path,
// snowflake://DSN (snowflake:// alone: the DSN is in DVT_SNOWFLAKE_DSN), a
// libpq URL postgres://… or postgresql://…, or postgres:KEY=VALUE… (a
// libpq key=value DSN).
func (c *cli) parseTarget(flagName, raw string) (target, error) {
	switch {
	case strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") || strings.HasPrefix(raw, "postgres:"):
		dsn := raw
		if !strings.Contains(raw, "://") {
			dsn = strings.TrimPrefix(raw, "postgres:")
		}
		if strings.TrimSpace(dsn) == "" {
			return target{}, engine.Errorf(engine.CodeInvalidArgument, "--%s postgres: needs a key=value DSN after the scheme", flagName)
		}
		for _, s := range postgres.DSNSecrets(dsn) {
			c.addSecret(s)
		}
		return target{kind: "postgres", dsn: dsn}, nil
	case strings.HasPrefix(raw, "snowflake://"):
		dsn := strings.TrimPrefix(raw, "snowflake://")
		if dsn == "" {
			dsn = c.env("DVT_SNOWFLAKE_DSN")
			if dsn == "" {
				return target{}, engine.Errorf(engine.CodeInvalidArgument, "--%s snowflake:// needs a DSN after the scheme or in DVT_SNOWFLAKE_DSN", flagName)
			}
		}
		// The store scrubs its own errors; the CLI also keeps the password
		// out of anything it prints.
		for _, s := range snowflake.DSNSecrets(dsn) {
			c.addSecret(s)
		}
		return target{kind: "snowflake", dsn: dsn}, nil
	case strings.HasPrefix(raw, "sqlite://"):
		raw = strings.TrimPrefix(raw, "sqlite://")
	case strings.HasPrefix(raw, "sqlite:"):
		raw = strings.TrimPrefix(raw, "sqlite:")
	case strings.Contains(raw, "://"):
		scheme, _, _ := strings.Cut(raw, "://")
		return target{}, engine.Errorf(engine.CodeInvalidArgument, "--%s: unknown scheme %q (want sqlite:, snowflake:// or postgres://)", flagName, scheme)
	}
	if raw == "" {
		return target{}, engine.Errorf(engine.CodeInvalidArgument, "--%s: the SQLite path is empty", flagName)
	}
	return target{kind: "sqlite", path: raw}, nil
}

// redactTarget is a --store or --warehouse URL fit to print (a flag's
// default in --help): a Snowflake DSN's credentials become ***.
func redactTarget(raw string) string {
	if dsn, ok := strings.CutPrefix(raw, "snowflake://"); ok {
		return "snowflake://" + snowflake.RedactDSN(dsn)
	}
	if strings.HasPrefix(raw, "postgres") {
		return postgres.Redact(raw)
	}
	return raw
}

// stateStore is what the CLI needs of a state store: the store interface.
// Verify additionally needs sqlProjector.
type stateStore = store.Store

// openStore opens the state store. Read commands pass mustExist: they never
// create a database file.
func (c *cli) openStore(ctx context.Context, mustExist bool) (stateStore, error) {
	t, err := c.parseTarget("store", c.g.store)
	if err != nil {
		return nil, err
	}
	switch t.kind {
	case "snowflake":
		return c.openSnowflakeStore(ctx, t.dsn, mustExist)
	case "postgres":
		return postgres.Open(ctx, t.dsn, postgres.Options{MustExist: mustExist, LockWait: c.g.lockWait, OnWait: c.reportWait, Log: c.jsonLogger("wakeups")})
	default:
		if !mustExist && !c.fromTarget("store") {
			if err := checkSQLiteDir("store", t.path); err != nil {
				return nil, err
			}
		}
		return sqlite.Open(ctx, t.path, sqlite.Options{MustExist: mustExist, LockWait: c.g.lockWait, OnWait: c.reportWait})
	}
}

// ownDir is the directory dvtrun's default store and warehouse live in: it
// makes it on first use (beside an existing directory), so a fresh clone
// runs at once.
const ownDir = ".dvt"

// fromTarget reports whether --store or --warehouse (flagName) comes from
// the config's target, whose layout of directories dvtrun makes.
func (c *cli) fromTarget(flagName string) bool {
	return c.target != nil && !c.g.flagged[flagName]
}

// checkSQLiteDir refuses an SQLite file, given by a flag or the
// environment, whose directory does not exist (but dvtrun's own .dvt): a
// mistyped path must not make directories silently and leave the run's
// data where nobody looks.
func checkSQLiteDir(flagName, path string) error {
	dir := filepath.Dir(path)
	if filepath.Base(dir) == ownDir {
		dir = filepath.Dir(dir)
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return engine.Errorf(engine.CodeConfigInvalid, "--%s sqlite:%s: the directory %s does not exist (create it, or choose another path)", flagName, path, dir)
	}
	return nil
}

// wakeupsOf is the store's wake-up source (Postgres's LISTEN/NOTIFY), nil
// when the store is only polled.
func wakeupsOf(st any) wake.Source {
	if w, ok := st.(interface{ Wakeups() wake.Source }); ok {
		return w.Wakeups()
	}
	return nil
}

// warehouse is an engine.Warehouse the CLI must close.
type warehouse interface {
	engine.Warehouse
	Close() error
}

// openWarehouse opens the warehouse and returns it with the target name
// printed in the run header (dbt's target='…').
// openBoth opens the state store and the warehouse of a new run at once:
// each may cost round trips (a Snowflake login, the schema check) that
// need not wait for the other's. The store's error comes first: it says
// more.
func (c *cli) openBoth(ctx context.Context) (stateStore, warehouse, string, error) {
	type opened struct {
		wh   warehouse
		name string
		err  error
	}
	whc := make(chan opened, 1)
	go func() {
		wh, name, err := c.openWarehouse(ctx)
		whc <- opened{wh, name, err}
	}()
	st, err := c.openStore(ctx, false)
	w := <-whc
	switch {
	case err != nil:
		if w.err == nil {
			w.wh.Close()
		}
		return nil, nil, "", err
	case w.err != nil:
		st.Close()
		return nil, nil, "", w.err
	}
	return st, w.wh, w.name, nil
}

func (c *cli) openWarehouse(ctx context.Context) (warehouse, string, error) {
	return c.openWarehouseHeldBy(ctx, nil)
}

// openWarehouseHeldBy is openWarehouse whose lock waits name, through
// holder, who probably holds the lock.
func (c *cli) openWarehouseHeldBy(ctx context.Context, holder func(*engine.LockWait)) (warehouse, string, error) {
	return c.openWarehouseURL(ctx, c.g.warehouse, holder)
}

// openWarehouseURL opens the warehouse at raw (a --warehouse URL).
func (c *cli) openWarehouseURL(ctx context.Context, raw string, holder func(*engine.LockWait)) (warehouse, string, error) {
	t, err := c.parseTarget("warehouse", raw)
	if err != nil {
		return nil, "", err
	}
	switch t.kind {
	case "snowflake":
		wh, err := c.openSnowflakeWarehouse(ctx, t.dsn)
		return wh, "snowflake", err
	case "postgres":
		wh, err := postgres.OpenWarehouse(ctx, t.dsn, postgres.WarehouseOptions{LockWait: c.g.lockWait, OnWait: c.reportWait})
		return wh, "postgres", err
	default:
		if raw == c.g.warehouse && !c.fromTarget("warehouse") {
			if err := checkSQLiteDir("warehouse", t.path); err != nil {
				return nil, "", err
			}
		}
		wh, err := openSQLiteWarehouse(ctx, t.path, sqlite.WarehouseOptions{LockWait: c.g.lockWait, OnWait: c.reportWait, Holder: holder})
		return wh, "sqlite", err
	}
}
