package sftest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/duckdb/duckdb-go/v2"
)

// Snowflake error codes the server answers with. The driver turns code,
// message and sqlState into a *gosnowflake.SnowflakeError.
const (
	CodeStatementCount   = "000008" // several statements without MULTI_STATEMENT_COUNT
	CodeCanceled         = "000604" // SQL execution canceled
	CodeNotExecuting     = "000605" // abort-request for a query that is not running
	CodeLockConflict     = "000625" // transaction conflict, see the package doc
	CodeStatementTimeout = "000630" // STATEMENT_TIMEOUT_IN_SECONDS reached
	CodeCompilation      = "001003" // SQL compilation error
	CodeObjectNotFound   = "002003" // object does not exist
	CodeConversion       = "100038" // numeric/string conversion failed
	CodeExecution        = "100000" // any other execution error
	CodeTxAborted        = "000603" // sftest only: an earlier error aborted DuckDB's transaction
	CodeSessionGone      = "390111" // session no longer exists
	CodeAuthFailed       = "390100" // incorrect username or password
	codeSessionExpiredRC = "390112" // the driver renews the token on this code
)

// sfError is a Snowflake-shaped failure of one statement.
type sfError struct {
	code     string
	sqlState string
	msg      string
}

func (e *sfError) Error() string { return fmt.Sprintf("%s (%s): %s", e.code, e.sqlState, e.msg) }

func newSFError(code, sqlState, format string, args ...any) *sfError {
	return &sfError{code: code, sqlState: sqlState, msg: fmt.Sprintf(format, args...)}
}

// mapError turns a DuckDB (or context) error into a Snowflake error.
// A DuckDB transaction conflict becomes 000625 with sqlState 57014 — the
// code Snowflake uses when a statement gives up waiting for a lock — because
// a client must treat both the same way: roll back and retry.
func mapError(err error) *sfError {
	var se *sfError
	if errors.As(err, &se) {
		return se
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return newSFError(CodeCanceled, "57014", "SQL execution canceled")
	}
	var de *duckdb.Error
	if errors.As(err, &de) {
		msg := de.Msg
		switch de.Type {
		case duckdb.ErrorTypeTransaction:
			return newSFError(CodeLockConflict, "57014", "Statement aborted by a conflicting transaction; the transaction was rolled back: %s", msg)
		case duckdb.ErrorTypeInterrupt:
			return newSFError(CodeCanceled, "57014", "SQL execution canceled")
		case duckdb.ErrorTypeCatalog:
			if strings.Contains(msg, "does not exist") {
				return newSFError(CodeObjectNotFound, "42S02", "SQL compilation error:\n%s", msg)
			}
			return newSFError(CodeCompilation, "42000", "SQL compilation error:\n%s", msg)
		case duckdb.ErrorTypeParser, duckdb.ErrorTypeSyntax, duckdb.ErrorTypeBinder, duckdb.ErrorTypeParameterNotResolved:
			return newSFError(CodeCompilation, "42000", "SQL compilation error:\n%s", msg)
		case duckdb.ErrorTypeConversion, duckdb.ErrorTypeInvalidInput, duckdb.ErrorTypeOutOfRange:
			return newSFError(CodeConversion, "22018", "%s", msg)
		case duckdb.ErrorTypeConstraint:
			return newSFError("100072", "22000", "%s", msg)
		}
		return newSFError(CodeExecution, "XX000", "%s", msg)
	}
	return newSFError(CodeExecution, "XX000", "%s", err.Error())
}
