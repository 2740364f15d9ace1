package config

import (
	"regexp"
	"strings"
)

// Console is the operator console's (dvtrun ui, --ui) authentication, by
// reference: the names of environment variables that hold the secrets,
// never the secrets themselves. Neither set: no authentication.
type Console struct {
	TokenEnv     string `yaml:"tokenEnv" doc:"Name of the environment variable holding a bearer token (Authorization: Bearer TOKEN)."`
	BasicAuthEnv string `yaml:"basicAuthEnv" doc:"Name of the environment variable holding USER:PASSWORD for HTTP basic auth, which browsers prompt for."`
	// Hosts: a request naming another Host is refused (DNS rebinding).
	Hosts      []string `yaml:"hosts" doc:"DNS names the console answers to without authentication, besides localhost and IP addresses; a request naming another Host is refused (DNS rebinding)."`
	MaxStreams int      `yaml:"maxStreams" doc:"Most live run streams the console serves at once (0: the default, 64); past it a browser is told to retry."`
}

var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?$`)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (c Console) validate() error {
	for key, v := range map[string]string{"console.tokenEnv": c.TokenEnv, "console.basicAuthEnv": c.BasicAuthEnv} {
		if v != "" && !envName.MatchString(v) {
			return keyError(key, "%q is not an environment variable name", v)
		}
	}
	for _, h := range c.Hosts {
		if !hostName.MatchString(h) || len(h) > 253 || strings.Contains(h, ":") {
			return keyError("console.hosts", "%q is not a host name (a DNS name, without a port)", h)
		}
	}
	if c.MaxStreams < 0 {
		return keyError("console.maxStreams", "%d must not be negative", c.MaxStreams)
	}
	return nil
}
