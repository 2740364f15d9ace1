package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
	"github.com/dvtrun/dvtrun/engine/config"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// codeAuditFailed is audit verify's verdict when the log does not hold
// (exit 1): the line names the first broken run and runSeq.
const codeAuditFailed engine.Code = "AUDIT_VERIFY_FAILED"

// defaultAuditKeyEnv holds the signing key unless audit.signingKeyEnv
// names another variable.
const defaultAuditKeyEnv = "DVT_AUDIT_KEY"

// auditStore is a state store with the tamper-evident log.
type auditStore interface {
	stateStore
	audit.Store
	audit.CheckpointLog
	audit.RetentionLog
	LogEntry(ctx context.Context, runID string, runSeq int64) (audit.LogEntry, bool, error)
	Links(ctx context.Context, runID string) (map[int64]audit.StoredLink, error)
}

// auditGuards is a store that reports how it enforces append-only.
type auditGuards interface {
	AuditGuards(ctx context.Context) ([]audit.Guard, error)
}

func cmdAudit(ctx context.Context, c *cli, args []string) error {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		w := c.stdout
		if len(args) == 0 {
			w = c.stderr
		}
		fmt.Fprintln(w, `Usage: dvtrun audit verify [--checkpoint FILE] [--require-checkpoint] [--public-key KEY] [RUN_ID | --all]
       dvtrun audit checkpoint [--out FILE]
       dvtrun audit retain [--older-than DURATION]
       dvtrun audit prove RUN_ID SEQ
       dvtrun audit key [--new NAME]
       dvtrun audit doctor

The tamper-evident event log: every event is hash-chained per run, a
checkpointer indexes the chained events into one Merkle tree and signs
checkpoints of it (docs/guides/auditing.md).

Run `+"`dvtrun audit SUBCOMMAND --help`"+` for its flags.`)
		if len(args) == 0 {
			return &exitError{code: exitUsage}
		}
		return errHelp
	}
	switch args[0] {
	case "verify":
		return cmdAuditVerify(ctx, c, args[1:])
	case "checkpoint":
		return cmdAuditCheckpoint(ctx, c, args[1:])
	case "retain":
		return cmdAuditRetain(ctx, c, args[1:])
	case "prove":
		return cmdAuditProve(ctx, c, args[1:])
	case "key":
		return cmdAuditKey(ctx, c, args[1:])
	case "doctor":
		return cmdAuditDoctor(ctx, c, args[1:])
	}
	return engine.Errorf(engine.CodeInvalidArgument, "unknown audit subcommand %q (want verify, checkpoint, retain, prove, key or doctor)", args[0])
}

// openAuditStore opens the state store with its tamper-evident log.
func (c *cli) openAuditStore(ctx context.Context) (auditStore, error) {
	st, err := c.openStore(ctx, true)
	if err != nil {
		return nil, err
	}
	as, ok := st.(auditStore)
	if !ok {
		st.Close()
		return nil, engine.Errorf(engine.CodeInvalidArgument, "the %s state store has no tamper-evident log", c.g.store)
	}
	return as, nil
}

// signingKey reads the checkpoint signing key from the variable the
// configuration names (a secret by reference) and registers it for
// redaction.
func (c *cli) signingKey(cfg *config.Config) (string, error) {
	name := cmp.Or(cfg.Audit.SigningKeyEnv, defaultAuditKeyEnv)
	key := strings.TrimSpace(c.env(name))
	if key == "" {
		return "", engine.Errorf(engine.CodeSecretNotFound, "the audit signing key variable %s is empty or unset (create a key with `dvtrun audit key --new NAME`)", name)
	}
	c.addSecret(key)
	return key, nil
}

// publicKey is the pinned verifier key: the flag, else the configuration.
func (c *cli) publicKey(flagValue string, cfg *config.Config) string {
	return strings.TrimSpace(cmp.Or(flagValue, cfg.Audit.PublicKey))
}

func cmdAuditVerify(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("audit verify", "[RUN_ID | --all]", "Recompute every hash of the runs' chains from their rows, cross-check the runs of the event table,\ndvt_runs, dvt_run_seq and the global log, check the log against the recomputed hashes and its\nMerkle root against the stored checkpoints (and --checkpoint, held outside the store) with the\npinned public key. Exit 0 when everything holds; 1 naming the first broken run and runSeq (or\nlog index). The last line says what a checkpoint held outside the store would add.")
	all := fs.Bool("all", false, "verify every run")
	cpFile := fs.String("checkpoint", "", "a signed checkpoint `FILE` held outside the store: the log must still have its root")
	pub := fs.String("public-key", "", "the pinned verifier `KEY` (default: audit.publicKey in the configuration)")
	require := fs.Bool("require-checkpoint", false, "exit 1 unless --checkpoint is given and covers the whole log (for audits run by cron)")
	pos, err := c.parse(fs, args, 0, 1)
	if err != nil {
		return err
	}
	if *all == (len(pos) == 1) {
		return engine.Errorf(engine.CodeInvalidArgument, "audit verify needs a RUN_ID or --all (not both)")
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	o := audit.VerifyOptions{PublicKey: c.publicKey(*pub, cfg)}
	if len(pos) == 1 {
		o.RunID = pos[0]
	}
	if *cpFile != "" {
		if o.External, err = os.ReadFile(*cpFile); err != nil {
			return engine.Errorf(engine.CodeInvalidArgument, "cannot read the checkpoint %s: %v", *cpFile, plan.PathErr(err))
		}
	}
	st, err := c.openAuditStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	rep, err := audit.Verify(ctx, st, o)
	if err != nil {
		return err
	}
	if rep.Problem != nil {
		return &exitError{code: exitFailed, err: engine.Errorf(codeAuditFailed, "%s", c.cleanLine(rep.Problem.Error()))}
	}
	fmt.Fprintf(c.stdout, "verified %d runs: %d events, %d chained; global log of %d events; %d stored checkpoints\n",
		rep.Runs, rep.Events, rep.Chained, rep.LogSize, rep.Checkpoints)
	if rep.Latest != nil {
		fmt.Fprintf(c.stdout, "newest checkpoint: %d events, root %s, signed by %s\n", rep.Latest.Size, base64.StdEncoding.EncodeToString(rep.Latest.Root[:]), c.clean(rep.Latest.Origin))
	}
	for _, h := range rep.Retained {
		fmt.Fprintf(c.stdout, "run %s: payloads removed by retention at %s (its signed retention record and the signed log verified; every other column still verified through its hash)\n", c.clean(h.RunID), c.clean(h.RetainedAt))
	}
	for _, h := range rep.Pending {
		fmt.Fprintf(c.stdout, "run %s: recorded for retention at %s, not yet signed; its payloads are all kept (the next `dvtrun audit retain` finishes it)\n", c.clean(h.RunID), c.clean(h.RetainedAt))
	}
	if rep.V1 > 0 {
		fmt.Fprintf(c.stdout, "%d events are chained in the v1 form (appended before v2): their payloads cannot be removed without losing their proof\n", rep.V1)
	}
	if rep.Unindexed > 0 {
		fmt.Fprintf(c.stdout, "%d chained events are not in the global log yet (appended since the last `dvtrun audit checkpoint`): only their chain protects them\n", rep.Unindexed)
	}
	if rep.NewRuns > 0 || rep.Appended > 0 {
		fmt.Fprintf(c.stdout, "%d runs and %d events were appended while verifying (this store reads no snapshot): not checked, left to the next verification\n", rep.NewRuns, rep.Appended)
	}
	line, proven := unproven(rep)
	if *require && !proven {
		return &exitError{code: exitFailed, err: engine.Errorf(codeAuditUnproven, "%s", line)}
	}
	fmt.Fprintln(c.stdout, line)
	return nil
}

// codeAuditUnproven is audit verify --require-checkpoint's verdict when no
// checkpoint held outside the store covers the whole log (exit 1).
const codeAuditUnproven engine.Code = "AUDIT_UNPROVEN"

// unproven is audit verify's last line: what the checks prove, and what
// only a checkpoint held outside the store can (proven is false then).
func unproven(rep audit.Report) (line string, proven bool) {
	switch {
	case rep.External == nil:
		return "not proven: no checkpoint held outside the store was given (--checkpoint FILE): a rewrite of the whole store (events, global log and stored checkpoints) cannot be detected", false
	case rep.External.Size < rep.LogSize:
		return fmt.Sprintf("not proven: the external checkpoint covers the log's first %d of %d events: a rewrite of the last %d together with the stored checkpoints cannot be detected", rep.External.Size, rep.LogSize, rep.LogSize-rep.External.Size), false
	}
	return fmt.Sprintf("proven against the external checkpoint: the log's %d events are the ones it signed", rep.External.Size), true
}

func cmdAuditRetain(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("audit retain", "", "Apply retention: remove the event payloads of every run that ended more than DURATION ago\nand whose every event a stored checkpoint covers (sign one first: `dvtrun audit checkpoint`).\nRuns holding events chained in the v1 form are skipped and counted (a v1 hash covers the payload).\nEach run gets a retention record signed with the audit key (audit.signingKeyEnv) and appended\nto the global log; a checkpoint covering the records is signed (and written to\naudit.checkpointFile) before any payload goes, so `dvtrun audit verify` still proves the log\nand names these runs. A rerun finishes an interrupted retention.")
	olderThan := fs.Duration("older-than", 0, "remove payloads of runs ended more than `DURATION` ago (default: audit.retention)")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	keep := cmp.Or(*olderThan, cfg.Audit.Retention)
	if keep <= 0 {
		return engine.Errorf(engine.CodeInvalidArgument, "no retention to apply: give --older-than DURATION or set audit.retention in the configuration")
	}
	key, err := c.signingKey(cfg)
	if err != nil {
		return err
	}
	st, err := c.openAuditStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	got, err := c.retain(ctx, st, &audit.Checkpointer{Log: st, SigningKey: key, Now: time.Now}, cfg, keep)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "retention (ended more than %s ago): %d runs recorded (signed, in the log of %d events); payloads of %d events removed from %d runs\n",
		keep, got.Recorded, got.Checkpoint.Size, got.Events, got.Runs)
	if got.SkippedV1 > 0 {
		fmt.Fprintf(c.stdout, "%d ended runs skipped: they hold events chained in the v1 form, whose hash covers the payload (removing it would leave them unproven); their payloads stay\n", got.SkippedV1)
	}
	return nil
}

// retain applies a retention policy (audit.Retainer: record, sign a
// checkpoint covering the records, remove) and writes a checkpoint it
// signed to audit.checkpointFile. cp signs, over st.
func (c *cli) retain(ctx context.Context, st auditStore, cp *audit.Checkpointer, cfg *config.Config, keep time.Duration) (audit.Retained, error) {
	r := &audit.Retainer{Log: st, Checkpointer: cp}
	got, err := r.Retain(ctx, keep)
	if err == nil && got.Fresh && cfg.Audit.CheckpointFile != "" {
		err = writeFileAtomic(relativeTo(c.g.config, cfg.Audit.CheckpointFile), got.Checkpoint.Note)
	}
	return got, err
}

func cmdAuditCheckpoint(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("audit checkpoint", "", "Give every chained event not yet in the global log its log index and sign a checkpoint of the\nlog (tree size and RFC 6962 root, a C2SP signed note) with the key in the variable\naudit.signingKeyEnv names (default "+defaultAuditKeyEnv+"). The checkpoint is stored and written to\n--out (default audit.checkpointFile) or printed.")
	out := fs.String("out", "", "write the signed checkpoint to `FILE` (default: audit.checkpointFile)")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	key, err := c.signingKey(cfg)
	if err != nil {
		return err
	}
	st, err := c.openAuditStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	cp, fresh, err := (&audit.Checkpointer{Log: st, SigningKey: key, Now: time.Now}).Checkpoint(ctx)
	if err != nil {
		return err
	}
	path := cmp.Or(*out, relativeTo(c.g.config, cfg.Audit.CheckpointFile))
	if path == "" {
		_, err := c.stdout.Write(cp.Note)
		return err
	}
	if err := writeFileAtomic(path, cp.Note); err != nil {
		return err
	}
	what := "signed"
	if !fresh {
		what = "unchanged since the last"
	}
	fmt.Fprintf(c.stdout, "checkpoint of %d events (%s) written to %s\n", cp.Size, what, c.clean(path))
	return nil
}

// inclusionProof is what `audit prove` prints: everything an outsider
// needs, with the public key, to check that the event is in the log the
// checkpoint signs (README "Tamper-evident log").
type inclusionProof struct {
	RunID    string `json:"runId"`
	RunSeq   int64  `json:"runSeq"`
	PrevHash string `json:"prevHash"`
	// ChainForm is dvtrun-chain-v2 (EventBytes with the payload as its
	// digest) or dvtrun-chain-v1 (events appended before v2).
	ChainForm  string   `json:"chainForm"`
	EventBytes string   `json:"eventBytes"`
	Hash       string   `json:"hash"`
	LogIndex   int64    `json:"logIndex"`
	TreeSize   int64    `json:"treeSize"`
	Proof      []string `json:"proof"` // base64 hashes, leaf to root
	Checkpoint string   `json:"checkpoint"`
}

func cmdAuditProve(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("audit prove", "RUN_ID SEQ", "Print, as JSON, an inclusion proof of one event in the newest stored checkpoint: the event's stored\nbytes and hashes, its log index, the RFC 6962 audit path and the signed checkpoint. An\noutsider checks it with the public key alone (README \"Tamper-evident log\").")
	pos, err := c.parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	seq, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || seq < 1 {
		return engine.Errorf(engine.CodeInvalidArgument, "audit prove: SEQ %q is not a positive runSeq", pos[1])
	}
	st, err := c.openAuditStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	links, err := st.Links(ctx, pos[0])
	if err != nil {
		return err
	}
	l, ok := links[seq]
	if !ok {
		return engine.Errorf(engine.CodeRunNotFound, "run %s has no event with runSeq %d", pos[0], seq)
	}
	if l.Hash == "" {
		return engine.Errorf(engine.CodeInvalidArgument, "run %s runSeq %d is not chained (it predates the chain)", pos[0], seq)
	}
	e, ok, err := st.LogEntry(ctx, pos[0], seq)
	if err != nil {
		return err
	}
	latest, haveCP, err := st.LatestCheckpoint(ctx)
	if err != nil {
		return err
	}
	if !ok || !haveCP || latest.Size <= e.Index {
		return engine.Errorf(engine.CodeInvalidArgument, "run %s runSeq %d is not in a checkpoint yet (run `dvtrun audit checkpoint`)", pos[0], seq)
	}
	entries, err := st.LogEntries(ctx, 0)
	if err != nil {
		return err
	}
	var tree audit.Tree
	for _, le := range entries[:min(int64(len(entries)), latest.Size)] {
		if err := tree.Add(le.Hash); err != nil {
			return err
		}
	}
	root, err := tree.Root(latest.Size)
	if err != nil {
		return err
	}
	if base64.StdEncoding.EncodeToString(root[:]) != latest.Root || e.Hash != l.Hash {
		return &exitError{code: exitFailed, err: engine.Errorf(codeAuditFailed, "the stored log does not match its newest checkpoint: run `dvtrun audit verify --all`")}
	}
	if len(l.EventBytes) == 0 {
		// SQLite, Postgres: the hashed bytes are the row's columns.
		recs, err := st.ListEvents(ctx, pos[0], seq-1, 1)
		if err != nil {
			return err
		}
		if len(recs) != 1 || recs[0].RunSeq != seq {
			return engine.Errorf(engine.CodeRunNotFound, "run %s has no event with runSeq %d", pos[0], seq)
		}
		l.EventBytes = audit.EventBytesV2(recs[0], l.PayloadSHA256)
		if audit.LinkV2(pos[0], seq, l.EventBytes, l.PrevHash) != l.Hash {
			l.EventBytes = audit.EventBytes(recs[0])
		}
	}
	form := audit.HashVersion2
	if audit.LinkV2(pos[0], seq, l.EventBytes, l.PrevHash) != l.Hash {
		form = audit.HashVersion
	}
	proof, err := tlog.ProveRecord(latest.Size, e.Index, &tree)
	if err != nil {
		return err
	}
	p := inclusionProof{RunID: pos[0], RunSeq: seq, PrevHash: l.PrevHash, ChainForm: form, EventBytes: string(l.EventBytes), Hash: l.Hash,
		LogIndex: e.Index, TreeSize: latest.Size, Proof: []string{}, Checkpoint: string(latest.Note)}
	for _, h := range proof {
		p.Proof = append(p.Proof, base64.StdEncoding.EncodeToString(h[:]))
	}
	return c.printJSON(p)
}

func cmdAuditKey(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("audit key", "", "Print the public key of the checkpoint signing key (in the variable audit.signingKeyEnv names,\ndefault "+defaultAuditKeyEnv+"): pin it as audit.publicKey where checkpoints are verified.\nWith --new NAME, make a new Ed25519 key pair named NAME (the checkpoints' origin) and print\nboth: store the private key in your secret manager, never in the configuration.")
	name := fs.String("new", "", "make a new key pair with this `NAME`")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if *name != "" {
		skey, vkey, err := audit.GenerateKey(rand.Reader, *name)
		if err != nil {
			return engine.Errorf(engine.CodeInvalidArgument, "audit key --new %s: %v", *name, err)
		}
		fmt.Fprintf(c.stdout, "private key (keep secret): %s\npublic key: %s\n", skey, vkey)
		return nil
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	key, err := c.signingKey(cfg)
	if err != nil {
		return err
	}
	vkey, err := audit.PublicKey(key)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, vkey)
	return nil
}

func cmdAuditDoctor(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("audit doctor", "", "Check what the store lets this connection do to the append-only tables: the triggers\n(SQLite, Postgres), and the privileges of the current user or role (Postgres, Snowflake:\nno UPDATE, DELETE, TRUNCATE or OWNERSHIP). Exit 1 when a check fails.")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	st, err := c.openStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	g, ok := st.(auditGuards)
	if !ok {
		return engine.Errorf(engine.CodeInvalidArgument, "the %s state store cannot report its append-only guards", c.g.store)
	}
	guards, err := g.AuditGuards(ctx)
	if err != nil {
		return err
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	failed := 0
	for _, x := range guards {
		res := "ok"
		if !x.OK {
			res, failed = "FAIL", failed+1
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", x.Check, res, c.cleanLine(x.Detail))
	}
	tw.Flush()
	if failed > 0 {
		return &exitError{code: exitFailed, err: engine.Errorf(codeAuditFailed, "%d of %d append-only checks failed: see README \"Tamper-evident log\" for the grants", failed, len(guards))}
	}
	return nil
}

// newAuditService is the checkpointer of serve and worker: every
// audit.every it indexes the new chained events, signs a checkpoint when
// the log grew and writes it to audit.checkpointFile.
func (c *cli) newAuditService(st stateStore, cfg *config.Config, log *slog.Logger) (*audit.Service, error) {
	as, ok := st.(auditStore)
	if !ok {
		return nil, engine.Errorf(engine.CodeConfigInvalid, "audit.every: the %s state store has no tamper-evident log", c.g.store)
	}
	key, err := c.signingKey(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := audit.PublicKey(key); err != nil {
		return nil, err
	}
	log = log.With("service", "audit")
	signer := &audit.Checkpointer{Log: as, SigningKey: key, Now: time.Now}
	return &audit.Service{
		Checkpointer: signer,
		Every:        cfg.Audit.Every,
		Publish: func(ctx context.Context, cp audit.Checkpoint) error {
			log.Info("checkpoint signed", "size", cp.Size, "root", base64.StdEncoding.EncodeToString(cp.Root[:]))
			if cfg.Audit.CheckpointFile != "" {
				if err := writeFileAtomic(relativeTo(c.g.config, cfg.Audit.CheckpointFile), cp.Note); err != nil {
					return err
				}
			}
			if cfg.Audit.Retention <= 0 {
				return nil
			}
			// A fresh checkpoint is what makes more runs eligible.
			got, err := c.retain(ctx, as, signer, cfg, cfg.Audit.Retention)
			if got.Recorded > 0 || got.Runs > 0 {
				log.Info("retention applied", "recorded", got.Recorded, "runs", got.Runs, "events", got.Events, "checkpoint", got.Checkpoint.Size)
			}
			if got.SkippedV1 > 0 {
				log.Info("retention skipped runs with v1 events (their hash covers the payload)", "runs", got.SkippedV1)
			}
			return err
		},
		OnError: func(err error) { log.Error("checkpoint failed", "error", err.Error()) },
	}, nil
}
