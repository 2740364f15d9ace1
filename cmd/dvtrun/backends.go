package main

import (
	"context"

	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// Compile-time checks that the backends are what the CLI consumes.
var (
	_ stateStore = (*sqlite.Store)(nil)
	_ stateStore = (*snowflake.Store)(nil)
	_ warehouse  = (*sqlite.Warehouse)(nil)
	_ warehouse  = (*snowflake.Warehouse)(nil)
)

// openSnowflakeStore opens the Snowflake state store. Snowflake has no file
// to leave behind, so read commands open it like writers do (its migrations
// are idempotent).
func openSnowflakeStore(ctx context.Context, dsn string, _ bool) (stateStore, error) {
	return snowflake.Open(ctx, dsn, snowflake.Options{})
}

func openSnowflakeWarehouse(ctx context.Context, dsn string) (warehouse, error) {
	return snowflake.OpenWarehouse(ctx, dsn)
}

func openSQLiteWarehouse(ctx context.Context, path string) (warehouse, error) {
	return sqlite.OpenWarehouse(ctx, path)
}
