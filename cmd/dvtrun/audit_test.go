package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine/delivery"
	"github.com/dvtrun/dvtrun/store/storetest"
)

// auditHarness runs the example plan once and signs a checkpoint of it
// with the test key, held in DVT_AUDIT_KEY as a deployment would.
func auditHarness(t *testing.T) (h *harness, runID, checkpoint string) {
	t.Helper()
	h = newHarness(t)
	h.env["DVT_AUDIT_KEY"] = storetest.TestKey
	if r := h.run("run", fixture("ok", "plan.yaml")); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	runID = h.onlyRun()
	checkpoint = filepath.Join(h.dir, "checkpoint.txt")
	if r := h.run("audit", "checkpoint", "--out", checkpoint); r.code != 0 || !strings.Contains(r.stdout, "written to") {
		t.Fatalf("audit checkpoint: %d %q %q", r.code, r.stdout, r.stderr)
	}
	return h, runID, checkpoint
}

// tamper runs statements on the state store file as its owner would:
// the append-only triggers dropped first.
func (h *harness) tamper(stmts ...string) {
	h.t.Helper()
	db, err := sql.Open("sqlite", h.statePath())
	if err != nil {
		h.t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(context.Background(), `SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%\_no\_%' ESCAPE '\'`)
	if err != nil {
		h.t.Fatal(err)
	}
	var drops []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			h.t.Fatal(err)
		}
		drops = append(drops, "DROP TRIGGER "+n)
	}
	rows.Close()
	stmts = append(drops, stmts...)
	for _, q := range stmts {
		if _, err := db.ExecContext(context.Background(), q); err != nil {
			h.t.Fatalf("%s: %v", q, err)
		}
	}
}

func TestAuditVerifyCLI(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		stmts func(run string) []string
		args  []string
		msgs  []string // in the error line; none: verify passes
	}{
		{"untouched", nil, nil, nil},
		{"payload updated", func(run string) []string {
			return []string{`UPDATE dvt_run_events SET payload = '{"rowsAffected":1}' WHERE run_id = '` + run + `' AND run_seq = 5`}
		}, nil, []string{"runSeq 5", "the payload does not hash to its payload_sha256"}},
		{"event type edited after its payload was removed", func(run string) []string {
			return []string{`UPDATE dvt_run_events SET payload = NULL, event_type = 'StepFailed' WHERE run_id = '` + run + `' AND run_seq = 5`}
		}, nil, []string{"runSeq 5", "the row does not hash to its hash"}},
		{"sequence row deleted and a payload edited", func(run string) []string {
			return []string{`DELETE FROM dvt_run_seq WHERE run_id = '` + run + `'`,
				`UPDATE dvt_run_events SET payload = '{"rowsAffected":1}' WHERE run_id = '` + run + `' AND run_seq = 5`}
		}, nil, []string{"runSeq 1", "no sequence row"}},
		{"event deleted", func(run string) []string {
			return []string{`DELETE FROM dvt_run_events WHERE run_id = '` + run + `' AND run_seq = 3`}
		}, nil, []string{"runSeq 3 is missing"}},
		{"tail truncated", func(run string) []string {
			return []string{`DELETE FROM dvt_run_events WHERE run_id = '` + run + `' AND run_seq > 6`}
		}, nil, []string{"runSeq 7 is missing"}},
		{"run deleted", func(run string) []string {
			return []string{`DELETE FROM dvt_run_events WHERE run_id = '` + run + `'`, `DELETE FROM dvt_run_seq WHERE run_id = '` + run + `'`}
		}, nil, []string{"runSeq 1: in the log at index"}},
		{"run, log and checkpoints deleted: the external checkpoint remembers", func(run string) []string {
			return []string{`DELETE FROM dvt_run_events`, `DELETE FROM dvt_run_seq`, `DELETE FROM dvt_runs`, `DELETE FROM dvt_audit_log`, `DELETE FROM dvt_audit_checkpoints`}
		}, []string{"--checkpoint", "checkpoint.txt"}, []string{"the external checkpoint covers", "events were removed"}},
		{"retention forged to hide an edit (issue 25, Found 1)", func(run string) []string {
			return []string{
				`UPDATE dvt_run_events SET payload = NULL WHERE run_id = '` + run + `'`,
				`UPDATE dvt_run_events SET event_type = 'RunFailed' WHERE run_id = '` + run + `' AND event_type = 'RunCompleted'`,
				`UPDATE dvt_run_seq SET status = 'FAILED' WHERE run_id = '` + run + `'`,
				`INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff) VALUES ('` + run + `', '2026-05-01T00:00:00.000000000Z', '2026-04-01T00:00:00.000000000Z')`,
			}
		}, []string{"--checkpoint", "checkpoint.txt"}, []string{"runSeq", "the row does not hash to its hash"}},
		// The v2 hash names the edited row; payloads removed alone under a
		// bare retention row are the retention evidence's to refuse.
		{"retention forged to remove payloads", func(run string) []string {
			return []string{
				`UPDATE dvt_run_events SET payload = NULL WHERE run_id = '` + run + `'`,
				`INSERT INTO dvt_audit_retention (run_id, removed_at, cutoff) VALUES ('` + run + `', '2026-05-01T00:00:00.000000000Z', '2026-04-01T00:00:00.000000000Z')`,
			}
		}, []string{"--checkpoint", "checkpoint.txt"}, []string{"retention: ", "no signed record"}},
		{"checkpoint replaced", func(string) []string {
			return []string{`UPDATE dvt_audit_checkpoints SET note = REPLACE(note, 'dvtrun.audit', 'dvtrun.other')`}
		}, nil, []string{"stored checkpoint of size", "not signed by the pinned key"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, runID, cp := auditHarness(t)
			if c.stmts != nil {
				h.tamper(c.stmts(runID)...)
			}
			args := []string{"audit", "verify", "--public-key", storetest.TestPublicKey}
			for _, a := range c.args {
				if a == "checkpoint.txt" {
					a = cp
				}
				args = append(args, a)
			}
			r := h.run(append(args, "--all")...)
			if c.msgs == nil {
				if r.code != 0 || !strings.Contains(r.stdout, "verified 1 runs") || !strings.Contains(r.stdout, "1 stored checkpoints") {
					t.Fatalf("exit %d: %q %q", r.code, r.stdout, r.stderr)
				}
				// Without a checkpoint held outside, the last line says
				// what is not proven, and --require-checkpoint fails on it.
				if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); !strings.HasPrefix(lines[len(lines)-1], "not proven: no checkpoint held outside the store") ||
					!strings.Contains(lines[len(lines)-1], "a rewrite of the whole store") {
					t.Fatalf("last line %q", lines[len(lines)-1])
				}
				wantError(t, h.run(append(args, "--all", "--require-checkpoint")...), exitFailed, "AUDIT_UNPROVEN", "not proven")
				r = h.run("audit", "verify", "--public-key", storetest.TestPublicKey, "--checkpoint", cp, "--require-checkpoint", runID)
				if r.code != 0 || !strings.Contains(r.stdout, "proven against the external checkpoint") {
					t.Fatalf("verify RUN_ID --checkpoint: exit %d %q %q", r.code, r.stdout, r.stderr)
				}
				return
			}
			wantError(t, r, exitFailed, "AUDIT_VERIFY_FAILED", c.msgs...)
		})
	}
}

func TestAuditCommands(t *testing.T) {
	t.Parallel()
	h, runID, cp := auditHarness(t)
	t.Run("key prints the public key of the signing key", func(t *testing.T) {
		r := h.run("audit", "key")
		if r.code != 0 || strings.TrimSpace(r.stdout) != storetest.TestPublicKey || strings.Contains(r.stdout+r.stderr, storetest.TestKey) {
			t.Fatalf("audit key: %d %q %q", r.code, r.stdout, r.stderr)
		}
		r = h.run("audit", "key", "--new", "acme.audit")
		if r.code != 0 || !strings.Contains(r.stdout, "private key (keep secret): PRIVATE+KEY+acme.audit+") || !strings.Contains(r.stdout, "public key: acme.audit+") {
			t.Fatalf("audit key --new: %d %q %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("key without the secret is SECRET_NOT_FOUND", func(t *testing.T) {
		h2 := newHarness(t)
		wantError(t, h2.run("audit", "key"), exitUsage, "SECRET_NOT_FOUND", "DVT_AUDIT_KEY")
	})
	t.Run("checkpoint again: unchanged, same note", func(t *testing.T) {
		before, _ := os.ReadFile(cp)
		r := h.run("audit", "checkpoint", "--out", cp)
		after, _ := os.ReadFile(cp)
		if r.code != 0 || !strings.Contains(r.stdout, "unchanged") || string(before) != string(after) {
			t.Fatalf("second checkpoint: %d %q %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("verify without a pinned key is refused", func(t *testing.T) {
		wantError(t, h.run("audit", "verify", "--all"), exitUsage, "INVALID_ARGUMENT", "no public key is pinned")
	})
	t.Run("prove prints a proof the independent verifier accepts", func(t *testing.T) {
		r := h.run("audit", "prove", runID, "3")
		if r.code != 0 {
			t.Fatalf("prove: %d %s", r.code, r.stderr)
		}
		var p inclusionProof
		if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
			t.Fatal(err)
		}
		if err := checkInclusionProof(r.stdout, storetest.TestPublicKey); err != nil {
			t.Fatalf("independent check of the proof: %v\n%s", err, r.stdout)
		}
		// A proof of another event does not pass for this one.
		var bad map[string]any
		json.Unmarshal([]byte(r.stdout), &bad)
		bad["runSeq"] = 4
		b, _ := json.Marshal(bad)
		if err := checkInclusionProof(string(b), storetest.TestPublicKey); err == nil {
			t.Fatal("a proof with another runSeq verifies")
		}
	})
	t.Run("prove an event the run does not have", func(t *testing.T) {
		wantError(t, h.run("audit", "prove", runID, "999"), exitUsage, "RUN_NOT_FOUND", "runSeq 999")
	})
	t.Run("doctor: triggers present, then one dropped", func(t *testing.T) {
		r := h.run("audit", "doctor")
		if r.code != 0 || strings.Count(r.stdout, " ok ") != 16 || !strings.Contains(r.stdout, "trigger dvt_run_seq_no_delete") ||
			!strings.Contains(r.stdout, "trigger dvt_audit_retention_no_insert") || !strings.Contains(r.stdout, "trigger dvt_runs_no_update") {
			t.Fatalf("doctor: %d %q %q", r.code, r.stdout, r.stderr)
		}
		h.tamper() // drops them
		wantError(t, h.run("audit", "doctor"), exitFailed, "AUDIT_VERIFY_FAILED", "16 of 16 append-only checks failed")
	})
}

// TestServeSignsCheckpoints: serve with an audit section signs a
// checkpoint of the run it ran, writes it beside the configuration, and
// the store verifies against it.
func TestServeSignsCheckpoints(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.env["DVT_AUDIT_KEY"] = storetest.TestKey
	cfg := filepath.Join(h.dir, "dvt.yaml")
	if err := os.WriteFile(cfg, []byte("audit:\n  signingKeyEnv: DVT_AUDIT_KEY\n  publicKey: "+storetest.TestPublicKey+
		"\n  checkpointFile: checkpoint.txt\n  every: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.env["DVT_CONFIG"] = cfg
	if r := h.run("enqueue", fixture("ok", "plan.yaml")); r.code != 0 {
		t.Fatalf("enqueue: %+v", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() { done <- h.runCtx(ctx, "serve", "--poll", "100ms") }()
	cp := filepath.Join(h.dir, "checkpoint.txt")
	// Every chained event of the finished run is in a checkpoint: the
	// run has ended, the log holds all its events and the newest
	// checkpoint covers the whole log. Bounded at 60 s.
	whole := regexp.MustCompile(`verified 1 runs: (\d+) events, (\d+) chained; global log of (\d+) events; [1-9]\d* stored checkpoints\nnewest checkpoint: (\d+) events`)
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := h.run("audit", "verify", "--all", "--checkpoint", cp)
		m := whole.FindStringSubmatch(r.stdout)
		if r.code == 0 && m != nil && m[1] == m[2] && m[2] == m[3] && m[3] == m[4] && strings.Contains(h.run("runs").stdout, "COMPLETED") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 60s for a checkpoint of the whole finished run; last verify: %d %q %q", r.code, r.stdout, r.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	if r := <-done; r.code != 0 || !strings.Contains(r.stderr, `"msg":"checkpoint signed"`) {
		t.Fatalf("serve exited %d: %s", r.code, r.stderr)
	}
}

// TestServeAppliesRetention: serve with audit.retention records the
// finished run for retention after a checkpoint, signs a checkpoint over
// the record (written to the checkpoint file) and removes the payloads;
// the store verifies against the file, naming the run.
func TestServeAppliesRetention(t *testing.T) {
	h := newHarness(t)
	h.env["DVT_AUDIT_KEY"] = storetest.TestKey
	cfg := filepath.Join(h.dir, "dvt.yaml")
	if err := os.WriteFile(cfg, []byte("audit:\n  signingKeyEnv: DVT_AUDIT_KEY\n  publicKey: "+storetest.TestPublicKey+
		"\n  checkpointFile: checkpoint.txt\n  every: 1s\n  retention: 1ns\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.env["DVT_CONFIG"] = cfg
	if r := h.run("enqueue", fixture("ok", "plan.yaml")); r.code != 0 {
		t.Fatalf("enqueue: %+v", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() { done <- h.runCtx(ctx, "serve", "--poll", "100ms") }()
	cp := filepath.Join(h.dir, "checkpoint.txt")
	deadline := time.Now().Add(60 * time.Second) // bounded, not a timing assertion
	for {
		r := h.run("audit", "verify", "--all", "--checkpoint", cp)
		if r.code == 0 && strings.Contains(r.stdout, ": payloads removed by retention at ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 60s for serve to apply retention; last verify: %d %q %q", r.code, r.stdout, r.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	if r := <-done; r.code != 0 || !strings.Contains(r.stderr, `"msg":"retention applied"`) {
		t.Fatalf("serve exited %d: %s", r.code, r.stderr)
	}
}

// TestCheckpointThroughTheOutbox: `outbox deliver` writes the signed
// checkpoint to a JSONL sink as a record of its own, and the note taken
// from that line is a checkpoint `audit verify --checkpoint` accepts.
func TestCheckpointThroughTheOutbox(t *testing.T) {
	t.Parallel()
	h, runID, _ := auditHarness(t)
	archive := filepath.Join(h.dir, "archive.jsonl")
	cfg := filepath.Join(h.dir, "dvt.yaml")
	if err := os.WriteFile(cfg, []byte("sinks:\n  - name: archive\n    jsonl: {path: "+strconv.Quote(archive)+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := h.run("outbox", "deliver", "--config", cfg, "--once"); r.code != 0 {
		t.Fatalf("outbox deliver: %d %q %q", r.code, r.stdout, r.stderr)
	}
	cps, err := delivery.ReadJSONLCheckpoints(archive)
	if err != nil || len(cps) != 1 {
		t.Fatalf("the sink's checkpoints: %+v %v, want the one signed", cps, err)
	}
	if evs, err := delivery.ReadJSONL(archive); err != nil || len(evs) != len(h.events(runID)) {
		t.Fatalf("the sink's run events: %d %v, want the run's %d", len(evs), err, len(h.events(runID)))
	}
	received := filepath.Join(h.dir, "received.txt")
	if err := os.WriteFile(received, []byte(cps[0].Note), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.run("audit", "verify", "--public-key", storetest.TestPublicKey, "--checkpoint", received, "--all")
	if r.code != 0 || !strings.Contains(r.stdout, "newest checkpoint: "+strconv.FormatInt(cps[0].TreeSize, 10)+" events") {
		t.Fatalf("verify --checkpoint with the received note: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := h.run("outbox", "list", "--config", cfg, "--sink", "archive"); r.code != 0 || !strings.Contains(r.stdout, "Checkpoint") {
		t.Fatalf("outbox list does not show the checkpoint delivery: %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// TestAuditRetainCLI: `audit retain` removes the payloads of a run a
// checkpoint covers, and `audit verify` still proves the log against the
// checkpoint held outside, naming the run.
func TestAuditRetainCLI(t *testing.T) {
	t.Parallel()
	h, runID, cp := auditHarness(t)
	wantError(t, h.run("audit", "retain"), 2, "INVALID_ARGUMENT", "--older-than")
	// Retention signs its records: no key, no retention.
	delete(h.env, "DVT_AUDIT_KEY")
	wantError(t, h.run("audit", "retain", "--older-than", "1ns"), 2, "SECRET_NOT_FOUND", "DVT_AUDIT_KEY")
	h.env["DVT_AUDIT_KEY"] = storetest.TestKey
	r := h.run("audit", "retain", "--older-than", "1ns")
	if r.code != 0 || !regexp.MustCompile(`1 runs recorded \(signed, in the log of \d+ events\); payloads of [1-9]\d* events removed from 1 runs`).MatchString(r.stdout) {
		t.Fatalf("audit retain: %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, e := range h.events(runID) {
		if p := strings.TrimSpace(string(e.Payload)); p != "" && p != "null" {
			t.Fatalf("runSeq %d keeps its payload %s", e.RunSeq, p)
		}
	}
	if r := h.run("audit", "retain", "--older-than", "1ns"); r.code != 0 || !strings.Contains(r.stdout, "payloads of 0 events removed from 0 runs") {
		t.Fatalf("second retain: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = h.run("audit", "verify", "--public-key", storetest.TestPublicKey, "--checkpoint", cp, "--all")
	if r.code != 0 || !strings.Contains(r.stdout, "run "+runID+": payloads removed by retention at ") || !strings.Contains(r.stdout, "its signed retention record") {
		t.Fatalf("verify after retention: %d %q %q", r.code, r.stdout, r.stderr)
	}
	// The trigger lets retention through and nothing else.
	db, err := sql.Open("sqlite", h.statePath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), `UPDATE dvt_run_events SET event_type = 'RunFailed' WHERE run_id = ? AND event_type = 'RunCompleted'`, runID); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("an edit of a retained run: %v, want refused as append-only", err)
	}
}
