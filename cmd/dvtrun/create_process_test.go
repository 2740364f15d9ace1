package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStoreCreationIsAtomic (issue 16, found 6): a `run` whose new SQLite
// state store cannot be written whole (here a file size limit, as a full
// disk would) fails STORE_UNAVAILABLE and leaves nothing at the store's
// path, so every command then finds no store, the same way, rather than a
// half-made one that readers call corrupt and writers adopt; a later run
// creates the store whole. The limits cut the creation at its first write,
// midway and late (a whole store is about 200 KB).
func TestStoreCreationIsAtomic(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	plan, err := filepath.Abs(fixture("ok", "plan.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, blocks := range []int{1, 64, 256} { // ulimit -f: 512-byte blocks (dash)
		t.Run(fmt.Sprintf("ulimit-f-%d", blocks), func(t *testing.T) {
			h := newHarness(t)
			never := newHarness(t) // where no store was ever made: what every command should see
			cmd := exec.Command("sh", "-c", fmt.Sprintf(`ulimit -f %d && exec "$0" "$@"`, blocks), bin, "run", plan)
			cmd.Env = append(os.Environ(), "DVT_STORE="+h.env["DVT_STORE"], "DVT_WAREHOUSE="+h.env["DVT_WAREHOUSE"])
			cmd.Dir = t.TempDir()
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err == nil {
				t.Fatalf("run under ulimit -f %d succeeded: the limit does not cut the store's creation", blocks)
			}
			if !strings.Contains(stderr.String(), "STORE_UNAVAILABLE: cannot create the state store "+h.statePath()) || strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("stderr %q: want one line saying the store could not be created", stderr.String())
			}
			entries, err := os.ReadDir(filepath.Dir(h.statePath()))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), filepath.Base(h.statePath())) || strings.Contains(e.Name(), ".creating-") {
					t.Errorf("left behind by the failed creation: %s", e.Name())
				}
			}
			for _, args := range [][]string{{"runs"}, {"status", "no-such-run"}} {
				got, want := h.run(args...), never.run(args...)
				if got.code != want.code || strings.Contains(got.stderr, "STORE_CORRUPT") || !strings.Contains(got.stderr, "no state store at") {
					t.Errorf("%v after the failed creation: exit %d %q; where no store ever was: exit %d %q", args, got.code, got.stderr, want.code, want.stderr)
				}
			}
			if r := h.run("run", plan); r.code != 0 {
				t.Fatalf("run without the limit: exit %d\n%s", r.code, r.stderr)
			}
			if runs, err := h.listRuns(); err != nil || len(runs) != 1 {
				t.Errorf("runs %v (%v), want the one run", runs, err)
			}
		})
	}
}
