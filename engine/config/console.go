package config

import "regexp"

// Console is the operator console's (dvtrun ui, --ui) authentication, by
// reference: the names of environment variables that hold the secrets,
// never the secrets themselves. Neither set: no authentication.
type Console struct {
	TokenEnv     string `yaml:"tokenEnv" doc:"Name of the environment variable holding a bearer token (Authorization: Bearer TOKEN)."`
	BasicAuthEnv string `yaml:"basicAuthEnv" doc:"Name of the environment variable holding USER:PASSWORD for HTTP basic auth, which browsers prompt for."`
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (c Console) validate() error {
	for key, v := range map[string]string{"console.tokenEnv": c.TokenEnv, "console.basicAuthEnv": c.BasicAuthEnv} {
		if v != "" && !envName.MatchString(v) {
			return keyError(key, "%q is not an environment variable name", v)
		}
	}
	return nil
}
