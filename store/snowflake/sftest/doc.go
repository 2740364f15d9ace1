// Package sftest is a Snowflake-protocol test server executing on embedded
// DuckDB, so that Snowflake code is tested through the real gosnowflake
// driver without a Snowflake account. Start(t) serves on a loopback port;
// DSN/Config/OpenDB point gosnowflake at it over plain http.
//
// Protocol (checked against gosnowflake v1.19.1): login-request (password,
// or SNOWFLAKE_JWT with any well-formed JWT — the signature is not
// verified), token-request, heartbeat, session delete, query-request with
// bindings, abort-request, and GET /queries/<id>/result for the statements
// of a multi-statement request. Results are always JSON
// (queryResultFormat "json": rowtype + rowset).
//
// Sessions: each session token owns one DuckDB connection, so BEGIN/COMMIT/
// ROLLBACK are per session. BEGIN inside a transaction and COMMIT/ROLLBACK
// outside one are no-ops, as in Snowflake.
package sftest
