package config

import (
	"strings"
	"time"
)

// Audit configures the tamper-evident log (issue 19): who signs its
// checkpoints, with what key, how often and where copies go.
//
//	audit:
//	  signingKeyEnv: DVT_AUDIT_KEY      # the variable holding the signer key
//	  publicKey: dvtrun.audit+1a2b3c4d+AQ…  # pinned: verify checks against it
//	  checkpointFile: /var/lib/dvtrun/checkpoint.txt
//	  every: 1m                         # serve and worker sign this often
//	  retention: 2160h                  # ended runs keep payloads 90 days
type Audit struct {
	// SigningKeyEnv names the environment variable holding the checkpoint
	// signing key (a signed-note PRIVATE+KEY+… string): a secret by
	// reference, never the key itself.
	SigningKeyEnv string `yaml:"signingKeyEnv"`
	// PublicKey is the pinned verifier key (name+hash+key) verify and
	// prove check signatures against.
	PublicKey string `yaml:"publicKey"`
	// CheckpointFile receives each new signed checkpoint (replaced whole).
	CheckpointFile string `yaml:"checkpointFile"`
	// Every is the checkpointer's cadence in serve and worker; 0: off.
	Every time.Duration `yaml:"every"`
	// Retention, when set, is how long an ended run keeps its event
	// payloads: `dvtrun audit retain` (and serve and worker after each
	// checkpoint) removes older ones once a checkpoint covers the run,
	// keeping the hashes; 0: payloads are kept.
	Retention time.Duration `yaml:"retention"`
}

// MinAuditEvery is the shortest checkpoint cadence accepted.
const MinAuditEvery = time.Second

func (a *Audit) validate() error {
	switch {
	case a.Every != 0 && a.Every < MinAuditEvery:
		return keyError("audit.every", "%s is below the minimum of %s (0 or absent: no checkpointer in serve and worker)", a.Every, MinAuditEvery)
	case a.Every != 0 && a.SigningKeyEnv == "":
		return keyError("audit.signingKeyEnv", "is required with audit.every: the checkpointer signs with it")
	case a.Retention < 0:
		return keyError("audit.retention", "%s is negative (0 or absent: payloads are kept)", a.Retention)
	case strings.HasPrefix(strings.TrimSpace(a.PublicKey), "PRIVATE+KEY"):
		return keyError("audit.publicKey", "is a private key; give the public key `dvtrun audit key` prints, and keep the private one in the variable signingKeyEnv names")
	}
	return nil
}
