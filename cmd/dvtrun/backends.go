package main

import (
	"context"
	"io"
	"sync"

	"github.com/snowflakedb/gosnowflake"

	"github.com/dvtrun/dvtrun/store/postgres"
	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// Compile-time checks that the backends are what the CLI consumes.
var (
	_ stateStore = (*sqlite.Store)(nil)
	_ stateStore = (*snowflake.Store)(nil)
	_ stateStore = (*postgres.Store)(nil)
	_ warehouse  = (*sqlite.Warehouse)(nil)
	_ warehouse  = (*snowflake.Warehouse)(nil)
	_ warehouse  = (*postgres.Warehouse)(nil)
)

// openSnowflakeStore opens the Snowflake state store. Snowflake has no file
// to leave behind, so read commands open it like writers do (its migrations
// are idempotent). Its waits for another process's lock (a table lock, the
// migration lease) last at most --lock-wait, with progress lines on stderr.
func (c *cli) openSnowflakeStore(ctx context.Context, dsn string, _ bool) (stateStore, error) {
	quietDriver()
	return snowflake.Open(ctx, dsn, snowflake.Options{LockWait: c.g.lockWait, OnWait: c.reportWait})
}

// openSnowflakeWarehouse opens the Snowflake warehouse: a step waits for
// other transactions' locks (its run's fence, a table it updates) at most
// --lock-wait in all, with a progress line now and then.
func (c *cli) openSnowflakeWarehouse(ctx context.Context, dsn string) (warehouse, error) {
	quietDriver()
	return snowflake.OpenWarehouse(ctx, dsn, snowflake.WarehouseOptions{LockWait: c.g.lockWait, OnWait: c.reportWait})
}

// quietDriver silences gosnowflake's own logger: it writes to stderr, where
// the CLI promises one line per error, and the stores already return (and
// scrub) every error it would log.
var quietDriver = sync.OnceFunc(func() {
	gosnowflake.GetLogger().SetOutput(io.Discard)
})

func openSQLiteWarehouse(ctx context.Context, path string, opts sqlite.WarehouseOptions) (warehouse, error) {
	return sqlite.OpenWarehouseWith(ctx, path, opts)
}
