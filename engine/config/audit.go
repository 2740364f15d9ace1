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
	// A secret by reference, never the key itself.
	SigningKeyEnv  string        `yaml:"signingKeyEnv" doc:"Name of the environment variable holding the checkpoint signing key (the PRIVATE+KEY+… string dvtrun audit key --new prints). Required with every."`
	PublicKey      string        `yaml:"publicKey" doc:"The pinned public key (name+hash+key, as dvtrun audit key prints) that audit verify and audit prove check signatures against."`
	CheckpointFile string        `yaml:"checkpointFile" doc:"A file that receives each new signed checkpoint (replaced whole): a copy outside the store."`
	Every          time.Duration `yaml:"every" doc:"How often serve and worker sign a checkpoint, at least 1s (0: never)."`
	Retention      time.Duration `yaml:"retention" doc:"How long an ended run keeps its event payloads once a checkpoint covers it: dvtrun audit retain (and serve and worker after each checkpoint) then removes them, keeping the hashes, so the log still verifies (0: payloads are kept)."`
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
