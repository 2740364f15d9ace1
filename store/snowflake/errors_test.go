package snowflake

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/snowflakedb/gosnowflake"
)

// TestRetryable: lock contention, expired sessions and network failures
// retry the transaction; statement errors and cancellation do not.
func TestRetryable(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"too many lock waiters (000625)", &gosnowflake.SnowflakeError{Number: 625, SQLState: "57014"}, true},
		{"wrapped 000625", fmt.Errorf("write: %w", &gosnowflake.SnowflakeError{Number: 625}), true},
		{"session expired", &gosnowflake.SnowflakeError{Number: 390112}, true},
		{"serialization failure", &gosnowflake.SnowflakeError{Number: 1, SQLState: "40001"}, true},
		{"network", &net.OpError{Op: "dial", Err: io.ErrUnexpectedEOF}, true},
		{"compilation error", &gosnowflake.SnowflakeError{Number: 1003, SQLState: "42000", Message: "syntax error"}, false},
		{"object does not exist", &gosnowflake.SnowflakeError{Number: 2003, SQLState: "42S02"}, false},
		{"cancelled", context.Canceled, false},
		{"nil", nil, false},
	}
	for _, c := range cases {
		if got := retryable(c.err); got != c.want {
			t.Errorf("%s: retryable = %v, want %v", c.name, got, c.want)
		}
	}
}
