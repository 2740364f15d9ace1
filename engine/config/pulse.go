package config

import "time"

// MinPulseInterval is the shortest pulse interval the configuration and
// the CLI accept: below it the pulse would be a busy loop on the store.
const MinPulseInterval = 10 * time.Millisecond

// Pulse configures a process's heartbeat (engine/pulse): every Interval
// ONE state-store request renews the leases of all the process's runs and
// fetches their new signals.
//
//	pulse:
//	  interval: 2s
type Pulse struct {
	// The CLI also holds it to at most a third of the lease TTL.
	Interval time.Duration `yaml:"interval" doc:"Time between two requests, at least 10ms (0: the default for the store: 250ms on SQLite, 2s on Snowflake, where every request is a query that keeps the warehouse awake). Held to at most a third of the lease TTL."`
}

func (p *Pulse) validate() error {
	if p.Interval != 0 && p.Interval < MinPulseInterval {
		return keyError("pulse.interval", "%s is below the minimum of %s (0 or absent: the default for the store)", p.Interval, MinPulseInterval)
	}
	return nil
}
