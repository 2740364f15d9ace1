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

// Config is the whole configuration file.
type Config struct {
	// Target is the default target (--target and DVT_TARGET override it).
	Target    string             `yaml:"target"`
	Targets   map[string]*Target `yaml:"targets"`
	Sinks     []Sink             `yaml:"sinks"`
	Signals   SignalPolicy       `yaml:"signals"`
	Schedules []Schedule         `yaml:"schedules"`
	Limits    Limits             `yaml:"limits"`
	Pulse     Pulse              `yaml:"pulse"`
	Console   Console            `yaml:"console"`
	// StateStore is read key by key (see its UnmarshalYAML).
	StateStore StateStore `yaml:"stateStore"`
	// Temporal is where runs on Temporal start their workflows when their
	// target has no temporal block of its own.
	Temporal Temporal `yaml:"temporal"`
	// Audit is the tamper-evident log's checkpointing.
	Audit Audit `yaml:"audit"`
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
