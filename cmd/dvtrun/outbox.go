package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/config"
	"github.com/dvtrun/dvtrun/engine/delivery"
)

func cmdOutbox(ctx context.Context, c *cli, args []string) error {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		w := c.stdout
		if len(args) == 0 {
			w = c.stderr
		}
		fmt.Fprintln(w, `Usage: dvtrun outbox deliver --config FILE [--once]
       dvtrun outbox list [--sink S] [--state pending|delivered|dead] [--json]
       dvtrun outbox dead [--sink S] [--json]
       dvtrun outbox retry [EVENT_ID | --all-dead] [--sink S]

Run `+"`dvtrun outbox SUBCOMMAND --help`"+` for its flags.`)
		if len(args) == 0 {
			return &exitError{code: exitUsage}
		}
		return errHelp
	}
	switch args[0] {
	case "deliver":
		return cmdOutboxDeliver(ctx, c, args[1:])
	case "list":
		return cmdOutboxList(ctx, c, args[1:], "list", "List the delivery state of outbox events per sink, in (run, runSeq) order.")
	case "dead":
		return cmdOutboxList(ctx, c, args[1:], "dead", "List the dead letters: deliveries that failed for good (replay them with `dvtrun outbox retry`).")
	case "retry":
		return cmdOutboxRetry(ctx, c, args[1:])
	}
	return engine.Errorf(engine.CodeInvalidArgument, "unknown outbox subcommand %q (want deliver, list, dead or retry)", args[0])
}

// deliveryStore opens the state store as the delivery package consumes it.
func (c *cli) deliveryStore(ctx context.Context, mustExist bool) (stateStore, delivery.Store, error) {
	st, err := c.openStore(ctx, mustExist)
	if err != nil {
		return nil, nil, err
	}
	ds, ok := st.(delivery.Store)
	if !ok {
		st.Close()
		return nil, nil, engine.Errorf(engine.CodeInvalidArgument, "this state store does not support outbox delivery")
	}
	return st, ds, nil
}

// closer is a sink that holds a resource (the JSONL file).
type closer interface{ Close() error }

// deliveryTargets builds the configured sinks. A webhook's secrets are read
// here, from the variable its secretEnv names, and registered for redaction.
func (c *cli) deliveryTargets(cfg *config.Config, clock engine.Clock) ([]delivery.Target, func(), error) {
	var targets []delivery.Target
	var open []closer
	closeAll := func() {
		for _, o := range open {
			o.Close()
		}
	}
	for i, s := range cfg.Sinks {
		policy := delivery.Policy{MaxAttempts: s.Retry.MaxAttempts, MaxAge: s.Retry.MaxAge, Backoff: s.Retry.Backoff, MaxBackoff: s.Retry.MaxBackoff}
		var sink delivery.Sink
		switch {
		case s.Webhook != nil:
			secrets := ""
			if name := s.Webhook.SecretEnv; name != "" {
				secrets = c.env(name)
				if strings.TrimSpace(secrets) == "" {
					closeAll()
					return nil, nil, engine.Errorf(engine.CodeConfigInvalid, "sinks[%d].webhook.secretEnv: the environment variable %s is empty or unset", i, name)
				}
				for _, v := range strings.FieldsFunc(secrets, func(r rune) bool { return r == ',' || r == ' ' }) {
					c.addSecret(v)
				}
			}
			wh, err := delivery.NewWebhook(delivery.WebhookOptions{URL: s.Webhook.URL, Secrets: secrets, SecretName: s.Webhook.SecretEnv, Timeout: s.Webhook.Timeout, Clock: clock})
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("sinks[%d] %q: %w", i, s.Name, err)
			}
			sink = wh
		case s.JSONL != nil:
			j, err := delivery.OpenJSONL(s.JSONL.Path)
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("sinks[%d] %q: %w", i, s.Name, err)
			}
			open = append(open, j)
			sink = j
		}
		targets = append(targets, delivery.Target{Name: s.Name, Sink: sink, Policy: policy})
	}
	return targets, closeAll, nil
}

// deliveryFlags are the delivery options of `outbox deliver`, and of
// `worker` and `serve` with the prefix "delivery-".
type deliveryFlags struct {
	prefix   string
	batch    int
	claimTTL time.Duration
	poll     time.Duration
}

// register adds the flags; a zero poll default means "the caller decides".
func (d *deliveryFlags) register(fs *flag.FlagSet, prefix string, poll time.Duration) {
	d.prefix = prefix
	fs.IntVar(&d.batch, prefix+"batch", 100, "deliveries per claim")
	fs.DurationVar(&d.claimTTL, prefix+"claim-ttl", 30*time.Second, "how long a claim keeps other delivery processes off its events")
	help := "wait between polls when nothing is due"
	if poll == 0 {
		help += " (default: --poll)"
	}
	fs.DurationVar(&d.poll, prefix+"poll", poll, help)
}

// newDelivery checks the flags against the config's sinks and builds the
// delivery service with its sinks open; closeSinks closes them.
func (c *cli) newDelivery(ctx context.Context, cfg *config.Config, d deliveryFlags, st stateStore, logger *slog.Logger) (svc *delivery.Service, closeSinks func(), err error) {
	if d.batch <= 0 || d.claimTTL <= 0 || d.poll <= 0 {
		return nil, nil, engine.Errorf(engine.CodeInvalidArgument, "--%[1]sbatch, --%[1]sclaim-ttl and --%[1]spoll must be positive", d.prefix)
	}
	// A process stops starting requests on a claim after half its TTL; a
	// request that may outlast the other half could still be in flight when
	// another process takes the claim over and sends the event again.
	for i, s := range cfg.Sinks {
		if s.Webhook == nil {
			continue
		}
		timeout := s.Webhook.Timeout
		if timeout <= 0 {
			timeout = delivery.DefaultWebhookTimeout
		}
		if timeout > d.claimTTL/2 {
			return nil, nil, engine.Errorf(engine.CodeInvalidArgument, "--%sclaim-ttl %s must be at least twice sinks[%d].webhook.timeout (%s)", d.prefix, d.claimTTL, i, timeout)
		}
	}
	ds, ok := st.(delivery.Store)
	if !ok {
		return nil, nil, engine.Errorf(engine.CodeInvalidArgument, "this state store does not support outbox delivery")
	}
	clock := engine.ClockFunc(time.Now)
	targets, closeSinks, err := c.deliveryTargets(cfg, clock)
	if err != nil {
		return nil, nil, err
	}
	svc, err = delivery.New(delivery.Options{
		Store: ds, Targets: targets, Clock: clock, IDs: engine.IDFunc(newID), Rand: randFloat, Logger: logger,
		BatchSize: d.batch, ClaimTTL: d.claimTTL, PollInterval: d.poll, Wakeups: wakeupsOf(st),
	})
	if err != nil {
		closeSinks()
		return nil, nil, err
	}
	return svc, closeSinks, nil
}

func cmdOutboxDeliver(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("outbox deliver", "", "Deliver outbox events to the sinks of the configuration file: at least once, in runSeq\n"+
		"order per run and sink, with backoff and a dead letter. Several processes may run at once\n"+
		"on one store; they share the work. Logs are JSON lines on stderr.\n"+
		"With --once: deliver what is due and exit, 0 when nothing is left pending or dead.\n"+
		"`dvtrun worker` and `dvtrun serve` deliver too, with the same options prefixed delivery-.")
	once := fs.Bool("once", false, "deliver what is due, then exit")
	var df deliveryFlags
	df.register(fs, "", time.Second)
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if c.g.config == "" {
		return engine.Errorf(engine.CodeInvalidArgument, "no configuration: pass --config FILE or set DVT_CONFIG")
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	if len(cfg.Sinks) == 0 {
		return &exitError{code: exitUsage, err: engine.Errorf(engine.CodeConfigInvalid, "%s: no sinks configured; nothing to deliver to", c.g.config)}
	}
	st, err := c.openStore(ctx, false)
	if err != nil {
		return err
	}
	defer st.Close()
	logger := slog.New(slog.NewJSONHandler(c.stderr, nil))
	if *once {
		logger = slog.New(slog.DiscardHandler) // --once ends with one line
	}
	svc, closeSinks, err := c.newDelivery(ctx, cfg, df, st, logger)
	if err != nil {
		return err
	}
	defer closeSinks()
	if *once {
		r, err := svc.Drain(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "delivered %d, failed %d (%d dead-lettered); left: %d pending, %d dead\n", r.Delivered, r.Failed, r.Dead, r.Pending, r.DeadTotal)
		if r.Pending > 0 || r.DeadTotal > 0 {
			return engine.Errorf(engine.CodeEventBusDeliveryFailed, "%d deliveries still pending and %d dead (see dvtrun outbox list)", r.Pending, r.DeadTotal)
		}
		return nil
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	svc.Stop()
	logger.Info("delivery stopped")
	return nil
}

func parseState(s string) (delivery.State, error) {
	st := delivery.State(strings.ToUpper(s))
	if s != "" && !st.Valid() {
		return "", engine.Errorf(engine.CodeInvalidArgument, "unknown state %q (want pending, delivered or dead)", s)
	}
	return st, nil
}

func cmdOutboxList(ctx context.Context, c *cli, args []string, name, summary string) error {
	fs := c.newFlagSet("outbox "+name, "", summary)
	sink := fs.String("sink", "", "only this sink's deliveries")
	var state *string
	if name == "list" {
		state = fs.String("state", "", "only deliveries in this state: pending, delivered or dead")
	}
	event := fs.String("event", "", "only this event's deliveries")
	limit := fs.Int("limit", 1000, "at most this many rows")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	f := delivery.Filter{Sink: *sink, EventID: *event, Limit: *limit, State: delivery.StateDead}
	if state != nil {
		st, err := parseState(*state)
		if err != nil {
			return err
		}
		f.State = st
	}
	st, ds, err := c.deliveryStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	rows, err := ds.ListDeliveries(ctx, f)
	if err != nil {
		return err
	}
	if *asJSON {
		if rows == nil {
			rows = []delivery.Delivery{}
		}
		return c.printJSON(rows)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "RUN_ID\tRUN_SEQ\tEVENT_TYPE\tEVENT_ID\tSINK\tSTATE\tATTEMPTS\tNEXT_ATTEMPT\tLAST_ERROR")
	for _, d := range rows {
		next := "-"
		if d.State == delivery.StatePending {
			next = fmtTime(d.NextAttemptAt)
		}
		lastErr := c.cleanLine(d.LastError)
		if len(lastErr) > 80 {
			lastErr = lastErr[:77] + "..."
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", c.clean(d.RunID), d.RunSeq, c.clean(string(d.EventType)), c.clean(d.EventID), c.clean(d.Sink), d.State, d.Attempts, next, lastErr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintln(c.stdout, "(none)")
	}
	return nil
}

func cmdOutboxRetry(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("outbox retry", "[EVENT_ID | --all-dead]", "Move dead letters back to pending, attempts reset: one event's, or all of them with --all-dead.\n"+
		"A running `dvtrun outbox deliver` delivers them next, in runSeq order with the run's later events.")
	all := fs.Bool("all-dead", false, "retry every dead letter")
	sink := fs.String("sink", "", "only this sink's dead letters")
	pos, err := c.parse(fs, args, 0, 1)
	if err != nil {
		return err
	}
	eventID := ""
	switch {
	case len(pos) == 1 && *all:
		return engine.Errorf(engine.CodeInvalidArgument, "give an EVENT_ID or --all-dead, not both")
	case len(pos) == 1:
		eventID = pos[0]
	case !*all:
		return engine.Errorf(engine.CodeInvalidArgument, "outbox retry needs an EVENT_ID or --all-dead (see dvtrun outbox retry --help)")
	}
	st, ds, err := c.deliveryStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	n, err := ds.RetryDead(ctx, *sink, eventID)
	if err != nil {
		return err
	}
	if n == 0 && eventID != "" {
		return engine.Errorf(engine.CodeInvalidArgument, "event %s has no dead letter%s", eventID, map[bool]string{true: " for sink " + *sink}[*sink != ""])
	}
	fmt.Fprintf(c.stdout, "%d dead letter(s) moved back to pending\n", n)
	return nil
}
