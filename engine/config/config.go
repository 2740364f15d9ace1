// Package config reads dvtrun's configuration file (--config FILE, or
// DVT_CONFIG): one YAML document whose top-level sections configure the
// long-running parts of dvtrun — event sinks for outbox delivery and the
// policy of who may send which signal, cron schedules and the limits of
// the run queue, the interval of a process's pulse, the state store's
// write-latency budget and spool, and the targets (store, warehouse,
// environment, threads) a run may be started on. Unknown keys are errors,
// so a typo never silently turns a feature off.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/dvtrun/dvtrun/engine"
)

// Config is the whole configuration file. Every key's doc tag is its
// entry in the configuration reference (WriteReference).
type Config struct {
	Target    string             `yaml:"target" doc:"The default target: the one a command uses without --target (or DVT_TARGET). Required when the file has targets."`
	Targets   map[string]*Target `yaml:"targets" key:"NAME" doc:"Where runs happen, by name, as a dbt profile's outputs: each target's state store, warehouse, environment id and threads. Choose one with --target NAME; a flag such as --store still wins over the target."`
	Sinks     []Sink             `yaml:"sinks" doc:"Where outbox delivery sends every event of every run, at least once and in order per run: dvtrun outbox deliver, or a worker (dvtrun worker, dvtrun serve), delivers to each sink."`
	Signals   SignalPolicy       `yaml:"signals" doc:"Who may send which signal (pause, resume, cancel, retry-step) in which environment. The run's runner enforces it: a refused signal is recorded as SignalRejected. No rules: every actor may send every signal."`
	Schedules []Schedule         `yaml:"schedules" doc:"Cron schedules: dvtrun scheduler (or dvtrun serve) turns each tick into a run request on the run queue, and a worker runs it."`
	Limits    Limits             `yaml:"limits" doc:"Bounds of the run queue and of the runs the workers start."`
	Pulse     Pulse              `yaml:"pulse" doc:"A process's heartbeat: every interval, one state-store request renews the leases of all its runs and fetches their new signals."`
	Console   Console            `yaml:"console" doc:"Authentication of the operator console (dvtrun ui, serve --ui), by the names of environment variables that hold the secrets, never the secrets themselves. Neither set: no authentication."`
	// StateStore is read key by key (see its UnmarshalYAML).
	StateStore StateStore `yaml:"stateStore" doc:"How a run stores its events when the state store is slow: how long an event may wait, and where a StepStarted that waited longer is kept until it is stored."`
	Temporal   Temporal   `yaml:"temporal" doc:"Where runs on Temporal start their workflows, for the targets with engine: temporal and no temporal block of their own. Empty fields: the local dev server of make temporal-dev."`
	Audit      Audit      `yaml:"audit" doc:"The tamper-evident event log: who signs its checkpoints, with which key, how often, where a copy goes, and how long payloads are kept."`
}

// Parse decodes and validates a configuration document; name is the file's
// name for error messages. Errors are CONFIG_INVALID and name the key.
func Parse(data []byte, name string) (*Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, engine.Errorf(engine.CodeConfigInvalid, "%s: %s", name, yamlMessage(err))
	}
	if err := c.validate(name); err != nil {
		return nil, engine.Errorf(engine.CodeConfigInvalid, "%s: %v", name, err)
	}
	return &c, nil
}

func (c *Config) validate(file string) error {
	if err := validateSinks(c.Sinks); err != nil {
		return err
	}
	if err := c.validateTargets(file); err != nil {
		return err
	}
	if err := c.Signals.validate(); err != nil {
		return err
	}
	if err := c.Temporal.validate("temporal"); err != nil {
		return err
	}
	if err := validateSchedules(c.Schedules); err != nil {
		return err
	}
	if err := c.validateScheduleShape(); err != nil {
		return err
	}
	if err := c.Pulse.validate(); err != nil {
		return err
	}
	if err := c.Console.validate(); err != nil {
		return err
	}
	if err := c.Audit.validate(); err != nil {
		return err
	}
	return c.Limits.validate()
}

// yamlMessage turns yaml.v3's multi-line type errors into one line.
func yamlMessage(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return strings.Join(te.Errors, "; ")
	}
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// keyError names the offending key, e.g. "sinks[1].webhook.url: is required".
func keyError(key, format string, args ...any) error {
	return fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...))
}
