package config

import (
	"strings"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
)

func TestParseAudit(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       Audit
		err        string
	}{
		{"absent: no checkpointer", "", Audit{}, ""},
		{"all of it", "audit: {signingKeyEnv: K, publicKey: 'a+1+AQ', checkpointFile: cp.txt, every: 1m}",
			Audit{SigningKeyEnv: "K", PublicKey: "a+1+AQ", CheckpointFile: "cp.txt", Every: time.Minute}, ""},
		{"every without a key", "audit: {every: 1m}", Audit{}, "audit.signingKeyEnv: is required with audit.every"},
		{"every below the minimum", "audit: {every: 10ms, signingKeyEnv: K}", Audit{}, "audit.every: 10ms is below the minimum of 1s"},
		{"a private key pinned", "audit: {publicKey: 'PRIVATE+KEY+a+1+AQ'}", Audit{}, "audit.publicKey: is a private key"},
		{"the key itself instead of its variable", "audit: {signingKey: x}", Audit{}, "field signingKey not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.text), "dvt.yaml")
			if tc.err != "" {
				if engine.CodeOf(err) != engine.CodeConfigInvalid || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want CONFIG_INVALID with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Audit != tc.want {
				t.Errorf("audit %+v, want %+v", c.Audit, tc.want)
			}
		})
	}
}
