// Package servicetest holds what the tests of dvtrun's services share.
package servicetest

import (
	"context"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/store/sqlite"
)

// WaitFor polls cond until it holds and fails t if it has not within a
// minute: a service's effect lands in the background, and the machine may
// be loaded, so the wait is on the condition, not on a time.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	// A timer, not the wall clock: engine/ reads no clock of its own.
	limit := time.NewTimer(time.Minute)
	defer limit.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for !cond() {
		select {
		case <-limit.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-poll.C:
		}
	}
}

// OpenSQLite opens (creating it if need be) a SQLite state store at path,
// closed when t ends; several calls on one path are several processes'
// handles on one store.
func OpenSQLite(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
