package config

import (
	"fmt"
	"net"
	"time"
)

// Temporal is the config's temporal block: where `--engine temporal` runs
// a run's workflow. Empty fields take the defaults of a local dev server
// (`make temporal-dev`).
type Temporal struct {
	Address   string `yaml:"address"`   // host:port of the frontend (default 127.0.0.1:7233)
	Namespace string `yaml:"namespace"` // default "default"
	TaskQueue string `yaml:"taskQueue"` // default "dvtrun"
	// HistoryBudget continues a run's workflow as new once its history
	// has this many events (0: when the server suggests it).
	HistoryBudget int `yaml:"historyBudget"`
	// HeartbeatTimeout is how soon a step whose worker died is retried
	// on another worker (default 5s); steps heartbeat 4 times as often.
	HeartbeatTimeout time.Duration `yaml:"heartbeatTimeout"`
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

func (t Temporal) validate() error {
	if t.Address != "" {
		if _, _, err := net.SplitHostPort(t.Address); err != nil {
			return fmt.Errorf("temporal.address %q is not host:port", t.Address)
		}
	}
	if t.HeartbeatTimeout < 0 || (t.HeartbeatTimeout > 0 && t.HeartbeatTimeout < 400*time.Millisecond) {
		return fmt.Errorf("temporal.heartbeatTimeout must be at least 400ms")
	}
	if t.HistoryBudget < 0 {
		return fmt.Errorf("temporal.historyBudget must not be negative")
	}
	return nil
}
