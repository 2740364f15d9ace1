// Package sftest is a Snowflake-protocol test server executing on embedded
// DuckDB, so that Snowflake code is tested through the real gosnowflake
// driver (v1.19.1) without a Snowflake account. Start(t) serves on a
// loopback port; DSN, Config and OpenDB point gosnowflake at it over plain
// http (Protocol "http", one attempt per request).
// Command sfserver runs it standalone and prints a DSN. In a test:
//
//	srv := sftest.Start(t)                   // closed by t.Cleanup
//	db := srv.OpenDB(t, "DVT", "PUBLIC")     // or sql.Open("snowflake", srv.DSN(…))
//	srv.ResetCounters() … srv.QueryRequests() // round trips per operation
//	srv.QueryLog()                           // query ids, QUERY_TAG, SQL text
//
// Network cost: Options.RTT (sfserver -rtt 100ms) delays every HTTP request
// like the way to a real account; Server.Requests counts every request
// served, and CountingTransport, set as the driver's Config.Transporter (or
// snowflake.Options.Transporter), counts one client's round trips by kind,
// so tests assert round trips, not SQL.
//
// Lost answers: Server.HoldAnswers(match) keeps back the answer to each
// matching query request after the server executed and committed it, until
// release, so a test can kill a client (or cancel it) between a committed
// request and its answer; a resend of the requestId is answered at once.
//
// # Protocol
//
// Endpoints: POST /session/v1/login-request (password, or SNOWFLAKE_JWT
// with any well-formed JWT — the signature is not verified, and the driver
// sends no LOGIN_NAME for it), /session/token-request (renewal with the
// master token), /session/heartbeat, /session?delete=true (close; rolls back
// an open transaction), /queries/v1/query-request, /queries/v1/abort-request
// ({"requestId"}; 000605 when nothing runs, which the driver accepts) and
// GET /queries/<id>/result, which the driver calls for the statements of a
// multi-statement request (for Exec only for the DML ones) and to collect
// asynchronous requests (gosnowflake.WithAsyncMode: answered 333334 at
// once, executed in the background, the result GET waits up to 40 s).
//
// Results are always JSON (queryResultFormat "json", rowtype + rowset, no
// chunks). Rowtype names are lower-case Snowflake types: fixed (with
// precision/scale; integers are fixed(38,0)), real, text, boolean, date,
// time, timestamp_ntz, timestamp_ltz (DuckDB TIMESTAMPTZ), variant (DuckDB
// JSON; the json extension is built into the bundled DuckDB 1.5.6, nothing
// is downloaded), array, object, binary. Values are strings in Snowflake's wire form:
// decimals as text, booleans "1"/"0", dates as days since the epoch,
// timestamps as "seconds.nanoseconds" since the epoch (floor seconds,
// non-negative fraction, as the driver parses them), binary as upper-case
// hex, VARIANT as JSON printed like Snowflake (sorted keys, 2-space
// indentation); NULL is JSON null. Every response carries data.queryId.
//
// Statement type ids: 0x1000 for anything DuckDB says returns rows (so WITH,
// comments or "(" in front do not matter), 0x3100/0x3200/0x3300/0x3400 for
// INSERT/UPDATE/DELETE/MERGE with Snowflake's count columns ("number of rows
// inserted", …; MERGE gets one column per kind of WHEN clause, counted from
// DuckDB's RETURNING merge_action, which the server appends),
// 0x4100 ALTER SESSION, 0x4300 USE, 0x5000 BEGIN/COMMIT/ROLLBACK, 0x6000
// other DDL (a "status" column), 0xA000 multi-statement with resultIds and
// resultTypes.
//
// Bindings ("1", "2", … → {type, value}): TEXT, FIXED, REAL, BOOLEAN,
// TIMESTAMP_NTZ/LTZ (nanoseconds since the epoch), TIMESTAMP_TZ
// ("nanoseconds offset+1440"), DATE (milliseconds since the epoch), TIME
// (nanoseconds since midnight), BINARY (hex), and JSON text for
// ARRAY/OBJECT/VARIANT. Array binds (gosnowflake.Array) run the statement
// once per row inside one transaction and report the summed count. Binds
// in a multi-statement request are refused (000002), as by Snowflake.
//
// Several statements in one request are refused with 000008 unless
// MULTI_STATEMENT_COUNT (request parameter, or session parameter from the
// DSN or ALTER SESSION) is 0 or their number. A failing statement ends the
// request with its error; a transaction the request opened is then rolled
// back, so a failed batch leaves neither locks nor half its writes.
//
// A requestId (URL parameter) that was answered before gets the same answer
// again without executing, as Snowflake executes a requestId once; a retry
// arriving while the first is running waits for it. Canceled requests are
// forgotten so that they can run when sent again. Closing the HTTP request
// or abort-request interrupts DuckDB through the request context.
//
// QUERY_TAG comes from ALTER SESSION SET QUERY_TAG, the login's session
// parameters, or the request parameter gosnowflake.WithQueryTag sends; it is
// recorded with every statement in QueryLog.
//
// # Snowflake Scripting
//
// EXECUTE IMMEDIATE $$ block $$ (or '…'), and an anonymous block sent as
// the request (DECLARE …, or BEGIN not followed by TRANSACTION, WORK, NAME
// or ";"), run as ONE statement — one HTTP round trip, as in Snowflake ("A
// block is considered one statement, even if the body of the block contains
// multiple statements", EXECUTE IMMEDIATE). The subset dvtrun uses, each
// pinned by a test quoting the documentation it follows (scripting_test.go):
//   - DECLARE section: variables (name [type] [DEFAULT expr]), RESULTSETs
//     (name RESULTSET [DEFAULT (query)]) and exceptions (name EXCEPTION
//     (-20001, 'message'));
//   - statements in order: SQL (BEGIN TRANSACTION, COMMIT and ROLLBACK
//     included, with the session's transaction rules), LET name [type] :=
//     expr, name := expr, LET res RESULTSET := (query) (the query runs at
//     assignment), SELECT … INTO :a, :b FROM … (one row), IF (…) THEN …
//     ELSEIF … ELSE … END IF, nested blocks,
//     RETURN expr, RETURN TABLE(res), RAISE name, RAISE (re-raise in a
//     handler);
//   - variables appear as :name in SQL and by bare name in expressions;
//     their values are substituted as literals before translation;
//   - EXCEPTION WHEN name [OR name] | STATEMENT_ERROR | OTHER THEN … (EXIT
//     handlers only), with SQLCODE, SQLERRM and SQLSTATE set;
//   - the result: RETURN TABLE(res) answers the RESULTSET's rows, RETURN
//     expr one row in a column "anonymous block", no RETURN a NULL there;
//   - an uncaught user exception fails the request with its number as the
//     code and sqlState P0001 ("Uncaught exception of type 'NAME' : msg").
//
// Not verified against Snowflake (dvtrun's blocks do not depend on them): an
// unhandled failure rolls back a transaction the block began, and a block
// that ends with its own transaction open is rolled back and fails with
// 000641 (the rule Snowflake documents for stored procedures). Not
// supported: cursors, loops, CONTINUE handlers, EXECUTE IMMEDIATE … USING,
// client binds with a block.
//
// # Sessions, transactions and locks
//
// Each session owns one DuckDB connection, so its transaction is invisible
// to and independent of every other session. BEGIN inside a transaction and
// COMMIT/ROLLBACK outside one are no-ops, and DDL (CREATE, ALTER, DROP,
// UNDROP, COMMENT, GRANT, REVOKE) commits an open transaction first and
// leaves the session in autocommit, as in Snowflake. DuckDB's
// transaction starts with the first statement after BEGIN, not at BEGIN.
//
// UPDATE, DELETE and MERGE take Snowflake's table lock: another
// transaction's write to the same table waits until COMMIT/ROLLBACK (or its
// request ends), at most the session's LOCK_TIMEOUT in seconds (0: fail at
// once) or Options.LockTimeout (default 5s rather than Snowflake's 12 hours,
// so a forgotten transaction fails a test instead of hanging it). A
// transaction that blocks such a wait and has run nothing for
// Options.IdleTxAbort (default 5 minutes, Snowflake's figure for a detached
// transaction, e.g. of a client that died) is aborted and rolled back; its
// session's statements then fail with 000603 until ROLLBACK. Because
// DuckDB's transaction starts after the lock is granted, a transaction that
// begins by locking sees the previous holder's commit, as under Snowflake's
// read committed. What DuckDB's snapshot
// isolation cannot wait out is reported as Snowflake error 000625 (sqlState
// 57014), the code Snowflake gives a statement aborted while waiting for a
// lock, so clients treat all of these as "roll back and retry":
//   - a DuckDB write-write conflict (a transaction that read before another
//     committed, then writes the same rows); the DuckDB transaction is rolled
//     back at once, later statements fail with 000625 and COMMIT fails
//     until the client ends the transaction;
//   - a lock wait beyond the timeout, or one that would deadlock;
//   - a 21st waiter on one lock.
//
// Transactions are visible to other sessions as in Snowflake, each pinned
// to its documentation in txinfo_test.go:
//   - CURRENT_SESSION() is the session id and CURRENT_TRANSACTION() the open
//     transaction's id, both VARCHAR of digits (NULL outside a
//     transaction). Transaction ids are unique on the server and increase;
//     BEGIN takes one, and an autocommit UPDATE/DELETE/MERGE has one while
//     it waits for or holds its lock.
//   - SHOW TRANSACTIONS [IN ACCOUNT]: id, user, session, name, started_on,
//     state ("running"), scope (0), lower-case column names; the running
//     transactions of the caller's user (the login name; IN ACCOUNT: all).
//   - SHOW LOCKS [IN ACCOUNT]: resource (DB.SCHEMA.TABLE as stored), type
//     ("PARTITIONS", Snowflake's value for a standard table), transaction,
//     transaction_started_on, status (HOLDING, or WAITING for a statement
//     queued on the lock, with acquired_on NULL), acquired_on, query_id,
//     session — the columns of Snowflake's documentation, in its order.
//   - SELECT SYSTEM$ABORT_TRANSACTION(id) (a number or a bind) from any
//     session of the same user: a running statement of the owner is
//     canceled, the transaction rolled back and its locks freed before the
//     call returns, so waiters proceed; the owner's statements and COMMIT
//     then fail with 000603 until ROLLBACK, as after the idle abort. An id
//     that is not running fails (100000, "… is not running"), as does an
//     autocommit statement's id; the success value "Aborted transaction
//     <id>." is a guess.
//   - STATEMENT_TIMEOUT_IN_SECONDS (ALTER SESSION or the DSN's session
//     parameters, which gosnowflake sends in the login request): a request
//     running longer, lock waits included, is canceled with 000630
//     "Statement reached its statement or warehouse timeout of N second(s)
//     and was canceled." (sqlState 57014).
//   - ABORT_DETACHED_QUERY is accepted both ways; the server aborts a query
//     as soon as its client goes away (its HTTP request closes) whatever
//     its value: no 5-minute grace, and FALSE's "the query completes" is
//     not emulated.
//
// # Names
//
// Database and schema names from the DSN and USE are upper-cased; each
// database is an attached in-memory DuckDB database shared by all sessions,
// created on first use with its schema. DuckDB resolves identifiers
// case-insensitively whether quoted or not, so "t" and T name the same
// table (in Snowflake they differ) — use one spelling per object. Result
// column names are upper-cased unless the statement wrote them quoted,
// which is how Snowflake names unquoted columns.
//
// # Rewrites
//
// The server lexes Snowflake SQL (strings with doubled quotes and backslash
// escapes, $$ strings, "identifiers", --, // and block comments) and
// rewrites tokens, never the inside of a literal or quoted identifier:
//   - string literals are re-emitted in DuckDB form (backslash escapes
//     decoded: \' \" \\ \n \t \r \b \f, octal \ooo, \xhh, \uhhhh);
//     $$…$$ becomes a plain literal;
//   - :1, :2 binds become $1, $2;
//   - in type position (after ::, after AS inside CAST, after a column name
//     inside parentheses): NUMBER/NUMERIC/DECIMAL without precision →
//     DECIMAL(38,0), with precision → DECIMAL(p,s); INT, INTEGER, SMALLINT,
//     TINYINT, BYTEINT → BIGINT; STRING, TEXT, CHAR…, VARCHAR(n) → VARCHAR;
//     TIMESTAMP_NTZ, DATETIME → TIMESTAMP; TIMESTAMP_LTZ, TIMESTAMP_TZ →
//     TIMESTAMPTZ (these keep microseconds, where Snowflake's default
//     precision is 9); any TIMESTAMP_xx(9) → TIMESTAMP_NS so nanoseconds survive
//     (it holds the UTC instant and reads back as timestamp_ntz); VARIANT,
//     OBJECT, ARRAY → JSON; FLOAT, FLOAT4, FLOAT8, REAL, DOUBLE → DOUBLE;
//     BINARY, VARBINARY → BLOB;
//   - col:a:b (also col:a.b, col:a[0], col:"key") → json_extract(col,
//     '$.a.b'); col:a::string (any cast to a non-semi-structured type) →
//     json_extract_string(col, '$.a')::VARCHAR, since Snowflake's cast
//     drops a JSON string's quotes;
//   - functions: PARSE_JSON → json, TRY_PARSE_JSON → try(json(…)),
//     TO_VARIANT/TO_JSON → to_json, IFF → if, CURRENT_TIMESTAMP() →
//     get_current_timestamp(), SYSDATE() → (get_current_timestamp() AT TIME
//     ZONE 'UTC'), HEX_DECODE_STRING → decode(unhex(…)),
//     TRY_HEX_DECODE_STRING → try(decode(unhex(…))), HEX_ENCODE → hex,
//     OBJECT_CONSTRUCT → json_object, ARRAY_CONSTRUCT → json_array, NVL →
//     coalesce, ZEROIFNULL(x) → coalesce(x, 0), ARRAY_SIZE →
//     json_array_length; DATEDIFF, TIMESTAMPDIFF, DATE_TRUNC and DATE_PART
//     get their bare date part quoted; DATEADD/TIMESTAMPADD(part, n, ts) →
//     ((ts) + (n) * INTERVAL '1 part');
//   - CREATE TABLE: PRIMARY KEY, UNIQUE, FOREIGN KEY/REFERENCES constraints
//     (column- and table-level, named or not) are dropped, since Snowflake
//     does not enforce them; so are TRANSIENT, CLUSTER BY (…), COMMENT = '…',
//     DATA_RETENTION_TIME_IN_DAYS = n, CHANGE_TRACKING = b, COPY GRANTS and
//     column COMMENT '…';
//   - handled by the server itself: BEGIN/START TRANSACTION, COMMIT,
//     ROLLBACK, ALTER SESSION SET/UNSET, USE [DATABASE|SCHEMA], USE
//     WAREHOUSE/ROLE (no-ops), CREATE DATABASE.
//
// Results: a query with VARIANT (JSON) columns runs as SELECT … CAST(c AS
// VARCHAR) … FROM (query) AS sftest_q(…), so the JSON text reaches the
// server with exact numbers and JSON null intact (duckdb-go would decode it
// to float64 and SQL NULL); a MERGE gets RETURNING merge_action appended.
//
// MERGE INTO … USING … WHEN [NOT] MATCHED, CREATE OR REPLACE TABLE|VIEW …
// AS and CURRENT_TIMESTAMP without parentheses run on DuckDB (1.5) as they
// are.
//
// # Fidelity on the state store's path
//
// Checked against Snowflake's documentation, emulated or avoided, pinned in
// fidelity_test.go, scripting_test.go and store/snowflake's tests:
//   - TIMESTAMP_TZ with an offset ("TIMESTAMP_TZ internally stores UTC time
//     together with an associated time zone offset", Date & time data
//     types): the server keeps the instant, not the offset, and reads it
//     back in UTC. Avoided: dvtrun writes every timestamp in UTC (+00:00),
//     so the instant is all there is; the round trip of a literal with
//     another offset keeps its instant to the nanosecond (TIMESTAMP_TZ(9)).
//   - SELECT ? AS a (Binding variables: the client types each bind):
//     emulated — DuckDB cannot type a column that is only a parameter, so
//     such a statement is prepared again with each parameter cast to the
//     type its bind decoded to (TEXT → VARCHAR, FIXED → BIGINT, …).
//   - VALUES in FROM/USING ("SELECT * FROM (VALUES (1, 'one'), …)" returns
//     COLUMN1, COLUMN2, and FROM VALUES (…), (…) needs no parentheses;
//     VALUES): emulated — an unaliased list gets COLUMN1…n, a list with
//     "AS alias (a, b)" (MERGE … USING (VALUES …) AS s (…), dvtrun's form)
//     runs as written.
//   - Quoted identifiers ("identifiers in double quotes are case-sensitive",
//     Identifier requirements): not emulated, DuckDB matches "t" and T alike.
//     Avoided: the state store's SQL never quotes an identifier (a test
//     scans sql/snowflake), and the warehouse upper-cases simple names
//     before quoting them (ident), the object an unquoted reference
//     resolves to.
//   - LIMIT ? (LIMIT / FETCH: count is a constant, which a bind is at
//     compile time): runs as in Snowflake.
//   - CREATE TABLE IF NOT EXISTS … AS SELECT (CREATE TABLE: "[ IF NOT
//     EXISTS ] … AS SELECT"): runs once; a second one leaves the table and
//     its rows alone. dvtrun creates its lock table with its row this way.
//   - UPDATE <table> SET … FROM <subquery> WHERE (UPDATE: "FROM
//     additional_tables … for selecting rows to update or for setting new
//     values"): runs on DuckDB as written. A target row joining several
//     source rows is updated from one of them in both; dvtrun's pulse_block
//     joins a source holding each run once.
//   - Error codes dvtrun maps (store/snowflake/errors.go): 000625 (sqlState
//     57014) for a statement that gave up waiting for a lock or was a 21st
//     waiter ("…aborted because the number of waiters for this lock exceeds
//     the 20 statements limit"), and for DuckDB conflicts Snowflake would
//     have waited out — retried by the store; 390112 (session token
//     expired: the driver renews it, gosnowflake's sessionExpiredCode) and
//     390111 (session gone) — retried on a new session; 002003 (object does
//     not exist), 001003 (compilation), 000008 (statement count), 000002
//     (binds in a multi-statement request), 000604 (canceled) and a
//     Scripting user exception's own number with sqlState P0001 — passed
//     to the caller. 000603 is the server's own (see below).
//
// # Known gaps
//
// No arrow results, result chunks, stage binds (the
// driver only uses them above client_stage_array_binding_threshold, which
// the server never sets), PUT/GET, SHOW (but SHOW TRANSACTIONS and SHOW
// LOCKS), DESCRIBE or INFORMATION_SCHEMA in Snowflake's shape. TIMESTAMP_TZ keeps the instant, not the offset.
// DATEADD computes in DuckDB intervals, to the microsecond: a TIMESTAMP_TZ(9)
// value loses its nanoseconds there (dvtrun adds only TTLs and delays). Quoted
// identifiers are matched case-insensitively. A
// runtime error (e.g. a failed cast) inside an explicit transaction aborts
// DuckDB's transaction, where Snowflake rolls back only the statement: the
// server rolls the transaction back at once and answers every later
// statement and COMMIT with 000603 (sqlState 25P02) until ROLLBACK, so a
// COMMIT never silently drops the earlier writes.
package sftest
