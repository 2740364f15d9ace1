package main

import (
	"context"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// The backends below are being built in parallel; until they land these
// report a clear error instead of failing to compile.

func openSnowflakeStore(ctx context.Context, dsn string, mustExist bool) (stateStore, error) {
	_, _, _ = ctx, dsn, mustExist
	return nil, engine.Errorf(engine.CodeStoreUnavailable, "the Snowflake state store is not available in this build")
}

func openSnowflakeWarehouse(ctx context.Context, dsn string) (warehouse, error) {
	_, _ = ctx, dsn
	return nil, engine.Errorf(engine.CodeStoreUnavailable, "the Snowflake warehouse is not available in this build")
}

func openSQLiteWarehouse(ctx context.Context, path string) (warehouse, error) {
	return sqlite.OpenWarehouse(ctx, path)
}
