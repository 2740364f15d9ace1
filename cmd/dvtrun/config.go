package main

import (
	"os"
	"os/user"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/config"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// loadConfig reads the --config file (DVT_CONFIG). Without one the
// configuration is empty: no sinks, and every actor may send every signal.
// A file that cannot be read or is invalid is CONFIG_INVALID, exit 2.
func (c *cli) loadConfig() (*config.Config, error) {
	if c.g.config == "" {
		return &config.Config{}, nil
	}
	data, err := os.ReadFile(c.g.config)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: engine.Errorf(engine.CodeConfigInvalid, "cannot read the configuration file %s: %v", c.g.config, plan.PathErr(err))}
	}
	cfg, err := config.Parse(data, c.g.config)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	return cfg, nil
}

// actor is who sends a signal: --actor, else the OS user.
func (c *cli) actor(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return envOr(c.env, "USER", "unknown")
}
