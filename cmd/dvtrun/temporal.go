package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/config"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runner"
	dvtemporal "github.com/dvtrun/dvtrun/engine/temporal"
)

func checkEngine(name string) error {
	switch name {
	case "", config.EngineLocal, config.EngineTemporal:
		return nil
	}
	return engine.Errorf(engine.CodeInvalidArgument, "--engine %q: want local or temporal", name)
}

// onTemporal reports whether a run executes on Temporal: --engine, else
// the engine the run (or the run a retry retries) started on — recorded,
// its RunStarted's engineType — else DVT_ENGINE, else the target's engine
// (one rule: the most specific to this command wins; the temporal block
// is the target's, else the top-level one — temporalBlock).
func (c *cli) onTemporal(flagValue, recorded string) bool {
	if flagValue == "" {
		flagValue = recorded
	}
	if flagValue == "" {
		flagValue = c.env("DVT_ENGINE")
	}
	if flagValue == "" && c.target != nil {
		flagValue = c.target.t.Engine
	}
	return flagValue == config.EngineTemporal
}

// startedOn is the engine a run started on: its RunStarted's engineType
// ("" for a run that never started).
func startedOn(events []engine.RunEventRecord) string {
	for _, ev := range events {
		if ev.EventType == engine.RunStarted {
			var p struct {
				EngineType string `json:"engineType"`
			}
			_ = json.Unmarshal(ev.Payload, &p)
			return p.EngineType
		}
	}
	return ""
}

// temporalBlock is the temporal block of the command's target (its own,
// else the top-level one), defaults filled, its files relative to the
// config file.
func (c *cli) temporalBlock(cfg *config.Config) config.Temporal {
	_, tc := cfg.Engine(c.targetName())
	c.temporalKey = cfg.TemporalKey(c.targetName())
	tc.APIKeyFile = relativeTo(c.g.config, tc.APIKeyFile)
	tc.TLS.CAFile = relativeTo(c.g.config, tc.TLS.CAFile)
	tc.TLS.CertFile = relativeTo(c.g.config, tc.TLS.CertFile)
	tc.TLS.KeyFile = relativeTo(c.g.config, tc.TLS.KeyFile)
	return tc
}

// temporalOptions are the client options of block tc: address and
// namespace, and its TLS and API key read from the files and the
// variable it names. A file that cannot be read or holds no usable PEM, a
// blank key: CONFIG_INVALID naming the key.
func (c *cli) temporalOptions(tc config.Temporal) (client.Options, error) {
	key := cmp.Or(c.temporalKey, "temporal")
	opts := client.Options{HostPort: tc.Address, Namespace: tc.Namespace,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))}
	bad := func(k, format string, args ...any) error {
		return engine.Errorf(engine.CodeConfigInvalid, "%s.%s: %s", key, k, fmt.Sprintf(format, args...))
	}
	read := func(k, file string) ([]byte, error) {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, bad(k, "cannot read %s: %v", file, plan.PathErr(err))
		}
		return data, nil
	}
	if tc.UsesTLS() {
		t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: tc.TLS.ServerName}
		if tc.TLS.CAFile != "" {
			pem, err := read("tls.caFile", tc.TLS.CAFile)
			if err != nil {
				return opts, err
			}
			t.RootCAs = x509.NewCertPool()
			if !t.RootCAs.AppendCertsFromPEM(pem) {
				return opts, bad("tls.caFile", "%s holds no PEM certificate", tc.TLS.CAFile)
			}
		}
		if tc.TLS.CertFile != "" {
			certPEM, err := read("tls.certFile", tc.TLS.CertFile)
			if err != nil {
				return opts, err
			}
			keyPEM, err := read("tls.keyFile", tc.TLS.KeyFile)
			if err != nil {
				return opts, err
			}
			cert, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				return opts, bad("tls.certFile", "%s and tls.keyFile %s are not a certificate and its private key in PEM: %v", tc.TLS.CertFile, tc.TLS.KeyFile, err)
			}
			t.Certificates = []tls.Certificate{cert}
		}
		opts.ConnectionOptions.TLS = t
	}
	var apiKey string
	switch {
	case tc.APIKeyEnv != "":
		if apiKey = strings.TrimSpace(c.env(tc.APIKeyEnv)); apiKey == "" {
			return opts, bad("apiKeyEnv", "the API key variable %s is unset, empty or only blanks", tc.APIKeyEnv)
		}
	case tc.APIKeyFile != "":
		data, err := read("apiKeyFile", tc.APIKeyFile)
		if err != nil {
			return opts, err
		}
		if apiKey = strings.TrimSpace(string(data)); apiKey == "" {
			return opts, bad("apiKeyFile", "%s is empty or only blanks", tc.APIKeyFile)
		}
	}
	if apiKey != "" {
		c.addSecret(apiKey)
		opts.Credentials = client.NewAPIKeyStaticCredentials(apiKey)
	}
	return opts, nil
}

// dialTemporal connects to the config's Temporal frontend; the SDK's own
// log goes to stderr at WARN and above only. A server that refuses the
// handshake (no or a wrong client certificate, an unknown CA) fails the
// dial within its 10s, with the TLS error.
func (c *cli) dialTemporal(ctx context.Context, tc config.Temporal) (client.Client, error) {
	opts, err := c.temporalOptions(tc)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := client.DialContext(dctx, opts)
	if err != nil {
		how := ""
		if tc.UsesTLS() {
			how = ", over TLS"
			// A server that refuses the client's certificate (or its
			// absence) ends the handshake; the client often sees only the
			// closed connection.
			if msg := err.Error(); strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF") || strings.Contains(msg, "certificate required") || strings.Contains(msg, "bad certificate") || strings.Contains(msg, "unknown certificate authority") {
				how += ", which the server ended: it may require a client certificate (tls.certFile, tls.keyFile) or not trust the one given"
			}
		}
		return nil, engine.Errorf(engine.CodeStoreUnavailable, "cannot reach the Temporal frontend at %s (namespace %s%s; the config's %s block, or `make temporal-dev` for a local server): %s", tc.Address, tc.Namespace, how, cmp.Or(c.temporalKey, "temporal"), c.redact(err.Error()))
	}
	return cl, nil
}

// temporalActivities are the adapter's activities on this process's store
// and warehouse; a run's plan is the bundle the store kept for it.
func (c *cli) temporalActivities(st stateStore, wh engine.Warehouse, lookup plan.SecretLookup, cfg *config.Config, tc config.Temporal, leaseTTL time.Duration) *dvtemporal.Activities {
	eng := c.engineFor(st)
	return &dvtemporal.Activities{
		Log: st, Clock: eng.Clock, IDs: eng.IDs, Warehouse: wh, Secrets: lookup, Signals: cfg.Signals,
		Namespace: tc.Namespace, Config: eng.Config, LeaseTTL: max(leaseTTL, 2*time.Minute), Heartbeat: tc.HeartbeatTimeout / 4,
		Plans: dvtemporal.PlanFunc(func(ctx context.Context, runID string) (*plan.Plan, error) {
			meta, err := st.GetRun(ctx, runID)
			if err != nil {
				return nil, err
			}
			recorded, err := engine.RecordedPlanRef(ctx, st, meta)
			if err != nil {
				return nil, err
			}
			b, err := c.runBundle(ctx, st, meta, recorded, "resume")
			if err != nil {
				return nil, err
			}
			return b.Plan, nil
		}),
	}
}

// startOnTemporal connects to the target's Temporal frontend and starts a
// worker, before the run is recorded: a frontend that is down leaves no
// QUEUED run behind that no engine would take.
func (c *cli) startOnTemporal(ctx context.Context, f runFlags, cfg *config.Config, st stateStore, wh engine.Warehouse, lookup plan.SecretLookup) (*temporalHost, error) {
	tc := c.temporalBlock(cfg)
	return c.hostTemporal(ctx, tc, f, sdkworker.Options{}, c.temporalActivities(st, wh, lookup, cfg, tc, f.leaseTTL))
}

// resumeOnTemporal is `dvtrun resume` of a run that started on Temporal:
// it joins the run's workflow, or starts a new execution of it when the
// last one failed or was terminated (dvtemporal.ResumeRun), with a worker
// in this process (any other dvtrun worker polling the run's task queue
// shares the steps). The snapshot is the store's.
func (c *cli) resumeOnTemporal(ctx context.Context, f runFlags, cfg *config.Config, st stateStore, wh engine.Warehouse, lookup plan.SecretLookup, runID string) (engine.Snapshot, error) {
	host, err := c.startOnTemporal(ctx, f, cfg, st, wh, lookup)
	if err != nil {
		return engine.Snapshot{}, err
	}
	defer host.close()
	return host.run(ctx, c.engineFor(st), f, runID, dvtemporal.ResumeRun)
}

// executeOnTemporal starts the run's workflow on host and waits for it
// (any other dvtrun worker polling its task queue shares the steps). A
// workflow Temporal did not start leaves the run failed to start
// (RunQueued → RunFailed), not QUEUED for ever. The snapshot is the
// store's.
func (c *cli) executeOnTemporal(ctx context.Context, host *temporalHost, f runFlags, st stateStore, rn *runner.Runner, runID string) (engine.Snapshot, error) {
	eng := c.engineFor(st)
	snap, err := host.run(ctx, eng, f, runID, dvtemporal.StartRun)
	if err == nil || ctx.Err() != nil {
		return snap, err
	}
	if now, serr := eng.GetRunStatus(context.WithoutCancel(ctx), runID); serr == nil && now.Status == engine.StatusQueued {
		if aerr := rn.AbortStart(context.WithoutCancel(ctx), runID, err); aerr != nil {
			return now, err
		}
		snap, _ = eng.GetRunStatus(context.WithoutCancel(ctx), runID)
	}
	return snap, err
}

// startFunc starts or joins a run's workflow: dvtemporal.StartRun or
// ResumeRun.
type startFunc func(ctx context.Context, c dvtemporal.Starter, taskQueue string, in dvtemporal.Input) (client.WorkflowRun, error)

// temporalHost is a Temporal client with a worker polling the block's task
// queue with dvtrun's workflow and activities.
type temporalHost struct {
	cl client.Client
	w  sdkworker.Worker
	tc config.Temporal
}

// hostTemporal connects and starts the worker; close stops both.
func (c *cli) hostTemporal(ctx context.Context, tc config.Temporal, f runFlags, opts sdkworker.Options, acts *dvtemporal.Activities) (*temporalHost, error) {
	cl, err := c.dialTemporal(ctx, tc)
	if err != nil {
		return nil, err
	}
	w := sdkworker.New(cl, tc.TaskQueue, opts)
	dvtemporal.Register(w, acts)
	if err := w.Start(); err != nil {
		cl.Close()
		return nil, engine.Errorf(engine.CodeStoreUnavailable, "the Temporal worker for task queue %s did not start: %v", tc.TaskQueue, err)
	}
	return &temporalHost{cl: cl, w: w, tc: tc}, nil
}

func (h *temporalHost) close() {
	h.w.Stop()
	h.cl.Close()
}

// run starts run runID's workflow — or joins it: the workflow id is the run
// id, so a request claimed again after its worker died, or started by two
// processes, has one workflow — and waits for it to end. The snapshot is
// the store's.
func (h *temporalHost) run(ctx context.Context, eng *engine.Engine, f runFlags, runID string, start startFunc) (engine.Snapshot, error) {
	run, err := start(ctx, h.cl, h.tc.TaskQueue, dvtemporal.Input{RunID: runID, Threads: f.threads, FailFast: f.failFast, HistoryBudget: h.tc.HistoryBudget, HeartbeatTimeout: h.tc.HeartbeatTimeout})
	if err != nil {
		return engine.Snapshot{}, err
	}
	werr := run.Get(ctx, nil)
	snap, err := eng.GetRunStatus(context.WithoutCancel(ctx), runID)
	if err != nil {
		return snap, err
	}
	if werr != nil && !snap.Status.Terminal() {
		if ctx.Err() != nil {
			return snap, engine.Errorf(engine.CodeStoreUnavailable, "run %s: interrupted; its workflow %s goes on on Temporal (any `dvtrun worker` on Temporal carries it)", runID, run.GetID())
		}
		return snap, engine.Errorf(engine.CodeStoreUnavailable, "run %s: its Temporal workflow ended without ending the run (resume it): %v", runID, werr)
	}
	return snap, nil
}

// forwardToTemporal hands a stored signal to the run's workflow when the
// run runs on Temporal (its providerRunRef says so); false: it does not.
func (c *cli) forwardToTemporal(ctx context.Context, cfg *config.Config, meta engine.RunMetadata, sg engine.Signal) (bool, error) {
	if !strings.HasPrefix(meta.ProviderRunRef, "temporal://") {
		return false, nil
	}
	cl, err := c.dialTemporal(ctx, c.temporalBlock(cfg))
	if err != nil {
		return true, err
	}
	defer cl.Close()
	return true, dvtemporal.Forward(ctx, cl, sg)
}

// reportSteps prints, once a Temporal run ended, each step's outcome from
// the store's snapshot, in the order the steps ended: the workers ran
// them, so this process saw no progress of its own.
func reportSteps(obs runner.Observer, p *plan.Plan, snap engine.Snapshot) {
	done := 0
	for _, st := range snap.Steps {
		s, ok := p.Step(st.StepID)
		if !ok || (st.Status != engine.StepStatusSuccess && st.Status != engine.StepStatusFailed && st.Status != engine.StepStatusSkipped) {
			continue
		}
		done++
		pr := runner.Progress{Phase: runner.PhaseStepDone, RunID: snap.RunID, Index: done, Total: len(p.Steps), Step: s, Status: st.Status,
			SkipReason: st.SkipReason, EngineAttempt: st.EngineAttemptID, LogicalAttempt: st.LogicalAttemptID, Elapsed: time.Duration(st.DurationMs) * time.Millisecond}
		if st.Error != nil {
			pr.Err = engine.Errorf(engine.Code(st.Error.Code), "%s", st.Error.Message)
		}
		obs.Report(pr)
	}
}
