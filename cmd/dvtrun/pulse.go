package main

import (
	"context"

	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/config"
	"github.com/dvtrun/dvtrun/engine/pulse"
	"github.com/dvtrun/dvtrun/engine/runner"
)

// The pulse's default intervals: on SQLite a request is a local
// transaction; on Snowflake it is a query that keeps the warehouse awake
// and costs a round trip, so seconds.
const (
	pulseSQLite    = 250 * time.Millisecond
	pulseSnowflake = 2 * time.Second
)

const pulseHelp = "renew this process's run leases and fetch its runs' signals every `D`: ONE state-store request per interval for all the process's runs " +
	"(config pulse.interval; default 250ms on SQLite, 2s on Snowflake, where each request is a query that keeps the warehouse awake). " +
	"Shorter: signals are decided sooner, at one more request each time; at most --lease-ttl/3"

// pulseInterval is the interval of this process's pulse: --pulse-interval,
// else the config's pulse.interval, else the store's default; a default
// longer than a third of the lease TTL is cut to it (renewals every TTL/3
// leave two failures of margin), a value asked for is refused.
func (c *cli) pulseInterval(f runFlags, cfg *config.Config) (time.Duration, error) {
	ceiling := f.leaseTTL / 3
	switch {
	case f.pulse > 0:
		return f.pulse, nil // check() held it to the ceiling
	case cfg.Pulse.Interval > ceiling:
		return 0, &exitError{code: exitUsage, err: engine.Errorf(engine.CodeConfigInvalid, "%s: pulse.interval %s is more than a third of the lease TTL (%s): the lease could expire between two renewals", c.g.config, cfg.Pulse.Interval, f.leaseTTL)}
	case cfg.Pulse.Interval > 0:
		return cfg.Pulse.Interval, nil
	}
	d := pulseSQLite
	if t, err := c.parseTarget("store", c.g.store); err == nil && t.kind == "snowflake" {
		d = pulseSnowflake
	}
	return min(d, ceiling), nil
}

// newPulse is the process's pulse over st, its leases owned by owner
// (not started).
func (c *cli) newPulse(st pulse.Store, owner string, f runFlags, cfg *config.Config, onError func(error)) (*pulse.Pulse, error) {
	every, err := c.pulseInterval(f, cfg)
	if err != nil {
		return nil, err
	}
	return pulse.New(pulse.Options{Store: st, Owner: owner, TTL: f.leaseTTL, Interval: every, Clock: engine.ClockFunc(time.Now), Sleep: sleepCtx, OnError: onError})
}

// joinPulse gives rn (of `run` or `resume`) the process's pulse, started;
// stop stops it once the run is over.
func (c *cli) joinPulse(ctx context.Context, rn *runner.Runner, st pulse.Store, f runFlags, cfg *config.Config) (stop func(), err error) {
	pl, err := c.newPulse(st, rn.Config.Owner, f, cfg, nil)
	if err != nil {
		return nil, err
	}
	if err := pl.Start(ctx); err != nil {
		return nil, err
	}
	rn.Pulse = pl
	return pl.Stop, nil
}
