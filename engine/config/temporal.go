package config

import (
	"net"
	"strings"
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
	// Secrets by reference only, as the console's: the key itself is never
	// in the file.
	APIKeyEnv  string      `yaml:"apiKeyEnv" doc:"Name of the environment variable holding an API key (Temporal Cloud), sent as Authorization: Bearer KEY; implies TLS."`
	APIKeyFile string      `yaml:"apiKeyFile" doc:"File holding the API key instead (relative to this file; surrounding blanks are ignored); implies TLS."`
	TLS        TemporalTLS `yaml:"tls" doc:"TLS to the frontend: the server's CA, a client certificate (mTLS), the server name. Off unless a key here or an API key is set."`
}

// TemporalTLS is a temporal block's TLS settings: files, relative to the
// config file, never the PEM itself.
type TemporalTLS struct {
	Enabled    bool   `yaml:"enabled" doc:"Use TLS with the system's CAs even when no other tls key is set."`
	CAFile     string `yaml:"caFile" doc:"PEM file of the CA(s) that signed the server's certificate (default: the system's CAs)."`
	CertFile   string `yaml:"certFile" doc:"PEM file of the client certificate (mTLS); needs keyFile."`
	KeyFile    string `yaml:"keyFile" doc:"PEM file of the client certificate's private key; needs certFile."`
	ServerName string `yaml:"serverName" doc:"The name the server's certificate must carry (default: the address's host)."`
}

// UsesTLS says whether the block connects with TLS: any tls key or an API
// key (Temporal Cloud takes keys over TLS only).
func (t Temporal) UsesTLS() bool {
	return t.TLS != (TemporalTLS{}) || t.APIKeyEnv != "" || t.APIKeyFile != ""
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

// TemporalKey is the key of the temporal block runs on target use — the
// target's own, else the top-level one — for errors that name it.
func (c *Config) TemporalKey(target string) string {
	if t := c.Targets[target]; t != nil && t.Temporal != nil {
		return "targets." + target + ".temporal"
	}
	return "temporal"
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
	for _, f := range [][2]string{{"apiKeyFile", t.APIKeyFile}, {"tls.caFile", t.TLS.CAFile}, {"tls.certFile", t.TLS.CertFile}, {"tls.keyFile", t.TLS.KeyFile}} {
		if strings.Contains(f[1], "-----BEGIN") || strings.Contains(f[1], "\n") {
			return keyError(key+"."+f[0], "give the path of a PEM file, not its contents (secrets stay out of the config)")
		}
	}
	switch {
	case t.APIKeyEnv != "" && t.APIKeyFile != "":
		return keyError(key+".apiKeyEnv", "give apiKeyEnv or apiKeyFile, not both")
	case t.APIKeyEnv != "" && !envName.MatchString(t.APIKeyEnv):
		return keyError(key+".apiKeyEnv", "%q is not an environment variable name", t.APIKeyEnv)
	case t.TLS.CertFile != "" && t.TLS.KeyFile == "":
		return keyError(key+".tls.keyFile", "is required with tls.certFile (the client certificate's private key)")
	case t.TLS.KeyFile != "" && t.TLS.CertFile == "":
		return keyError(key+".tls.certFile", "is required with tls.keyFile (the client certificate)")
	}
	return nil
}
