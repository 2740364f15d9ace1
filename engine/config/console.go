package config

import "regexp"

// Console is the operator console's (dvtrun ui, --ui) authentication, by
// reference: the names of environment variables that hold the secrets,
// never the secrets themselves. Neither set: no authentication.
type Console struct {
	// TokenEnv names the variable holding a bearer token
	// ("Authorization: Bearer TOKEN").
	TokenEnv string `yaml:"tokenEnv"`
	// BasicAuthEnv names the variable holding USER:PASSWORD for HTTP basic
	// auth, which browsers prompt for.
	BasicAuthEnv string `yaml:"basicAuthEnv"`
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
