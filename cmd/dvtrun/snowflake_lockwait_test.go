package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/store/snowflake"
	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

// TestSnowflakeStoreLockWait: the Snowflake store waits for another
// process's lock as long as --lock-wait (DVT_LOCK_WAIT) says, printing the
// progress line meanwhile, then fails with STORE_UNAVAILABLE naming what it
// waited for. Here a schema that needs a migration finds the migration
// lease held by a live process (renewed far into the future), so even a read
// command waits for it.
func TestSnowflakeStoreLockWait(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a Snowflake-protocol test server")
	}
	srv := sftest.Start(t)
	dsn := srv.DSN("DVT", "LOCKWAIT")
	ctx := context.Background()
	st, err := snowflake.Open(ctx, dsn, snowflake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, q := range []string{
		"DELETE FROM dvt_schema_version WHERE version = (SELECT MAX(version) FROM dvt_schema_version)",
		"UPDATE dvt_locks SET owner = 'other-process', expires_at = DATEADD(hour, 1, CAST(CURRENT_TIMESTAMP() AS TIMESTAMP_TZ(9))) WHERE lock_name = 'migrate'",
	} {
		if _, err := st.DB().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	h := newHarness(t)
	h.env["DVT_STORE"] = "snowflake://" + dsn
	h.env["DVT_LOCK_WAIT"] = "2s"
	start := time.Now()
	r := h.run("runs")
	took := time.Since(start)
	t.Logf("exit %d after %v:\n%s", r.code, took, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != exitUnavailable || len(lines) < 2 {
		t.Fatalf("runs behind a held migration lease: exit %d, stderr %q; want a progress line, then a failure with exit %d", r.code, r.stderr, exitUnavailable)
	}
	if want := "dvtrun: waiting for the lock on the schema migration lease held by process other-process"; !strings.HasPrefix(lines[0], want) {
		t.Errorf("progress line %q, want it to start %q", lines[0], want)
	}
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "dvtrun: STORE_UNAVAILABLE: the lock on the schema migration lease held by process other-process") ||
		!strings.Contains(last, "was not released within 2s (--lock-wait)") {
		t.Errorf("error line %q, want STORE_UNAVAILABLE naming the lease, its holder and the 2s budget", last)
	}
	if took < 2*time.Second || took > 15*time.Second {
		t.Errorf("gave up after %v, want about the 2s --lock-wait", took)
	}
}
