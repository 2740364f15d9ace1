package config

import (
	"net"
	"time"
)

// Temporal is a temporal block — the top-level one, or a target's: where a
// run on Temporal runs its workflow. Empty fields take the defaults of a
// local dev server (`make temporal-dev`).
type Temporal struct {
	Address          string        `yaml:"address" doc:"host:port of the Temporal frontend (default 127.0.0.1:7233)."`
	Namespace        string        `yaml:"namespace" doc:"The Temporal namespace (default default)."`
	TaskQueue        string        `yaml:"taskQueue" doc:"The task queue dvtrun's workers poll (default dvtrun)."`
	HistoryBudget    int           `yaml:"historyBudget" doc:"Continue a run's workflow as new once its history has this many events (0: when the server suggests it)."`
	HeartbeatTimeout time.Duration `yaml:"heartbeatTimeout" doc:"How soon a step whose worker died is retried on another worker, at least 400ms (default 5s); steps heartbeat 4 times as often."`
}

// WithDefaults fills the empty fields.
func (t Temporal) WithDefaults() Temporal {
	if t.Address == "" {
		t.Address = "127.0.0.1:7233"
	}
	if t.Namespace == "" {
		t.Namespace = "default"
	}
	if t.TaskQueue == "" {
		t.TaskQueue = "dvtrun"
	}
	if t.HeartbeatTimeout <= 0 {
		t.HeartbeatTimeout = 5 * time.Second
	}
	return t
}

// Engines a run executes on: a target's engine, --engine, DVT_ENGINE.
const (
	EngineLocal    = "local"
	EngineTemporal = "temporal"
)

// Engine is the engine a run on target executes on — the target's engine,
// else local — and the temporal block it uses there: the target's own,
// else the top-level one, with the defaults filled. target "" (no target)
// is local on the top-level block. --engine and DVT_ENGINE override the
// engine, never the block.
func (c *Config) Engine(target string) (string, Temporal) {
	tc := c.Temporal
	t := c.Targets[target]
	if t == nil {
		return EngineLocal, tc.WithDefaults()
	}
	if t.Temporal != nil {
		tc = *t.Temporal
	}
	if t.Engine == "" {
		return EngineLocal, tc.WithDefaults()
	}
	return t.Engine, tc.WithDefaults()
}

// validate checks the block at key (temporal, targets.NAME.temporal).
func (t Temporal) validate(key string) error {
	if t.Address != "" {
		if _, _, err := net.SplitHostPort(t.Address); err != nil {
			return keyError(key+".address", "%q is not host:port", t.Address)
		}
	}
	if t.HeartbeatTimeout < 0 || (t.HeartbeatTimeout > 0 && t.HeartbeatTimeout < 400*time.Millisecond) {
		return keyError(key+".heartbeatTimeout", "must be at least 400ms")
	}
	if t.HistoryBudget < 0 {
		return keyError(key+".historyBudget", "must not be negative")
	}
	return nil
}
