package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/audit"
)

// Signed audit checkpoints travel through the outbox as a stream of their
// own: their deliveries are rows of dvt_deliveries under the reserved run id
// CheckpointRunID with runSeq = tree size, so the claims, the order, the
// retries and the dead letter of run events apply to them unchanged (the
// stores' SQL names the same literal).
const (
	// CheckpointRunID is the run id of the checkpoint stream's deliveries;
	// no run has it (run ids are UUIDs).
	CheckpointRunID = "dvtrun.audit.checkpoints"
	// CheckpointEventType is what ListDeliveries reports as a checkpoint
	// delivery's event type (it has no event in the log).
	CheckpointEventType engine.EventType = "Checkpoint"
	// CheckpointKind marks a checkpoint record; run event records have no
	// "kind" field.
	CheckpointKind = "checkpoint"
)

// CheckpointRecord is what a sink receives for a signed checkpoint: a
// webhook's body (webhook-id is ID), a JSONL line. Note is the C2SP signed
// note exactly as stored: written to a file, it is what `dvtrun audit
// verify --checkpoint FILE` reads.
type CheckpointRecord struct {
	Kind     string `json:"kind"` // always "checkpoint"
	ID       string `json:"id"`   // checkpoint-<treeSize>, stable across redeliveries
	Origin   string `json:"origin"`
	TreeSize int64  `json:"treeSize"`
	RootHash string `json:"rootHash"` // base64, as in the note
	Note     string `json:"note"`
}

// CheckpointEventID is the delivery's event id (and webhook-id) of the
// checkpoint of a tree of size leaves.
func CheckpointEventID(size int64) string { return "checkpoint-" + strconv.FormatInt(size, 10) }

// NewCheckpointRecord is the record of a stored checkpoint.
func NewCheckpointRecord(c audit.StoredCheckpoint) CheckpointRecord {
	origin, _, _ := strings.Cut(string(c.Note), "\n")
	return CheckpointRecord{Kind: CheckpointKind, ID: CheckpointEventID(c.Size), Origin: origin, TreeSize: c.Size, RootHash: c.Root, Note: string(c.Note)}
}

// CheckpointSink is a Sink that also takes checkpoints; a sink that does
// not (openlineage: checkpoints are no lineage) has them marked delivered
// without sending anything.
type CheckpointSink interface {
	DeliverCheckpoints(ctx context.Context, cps []CheckpointRecord) (int, error)
}

// CheckpointReader reads stored checkpoints by tree size (store.AuditSQL
// implements it); AttachEvents needs it for checkpoint deliveries.
type CheckpointReader interface {
	CheckpointsBetween(ctx context.Context, lo, hi int64) ([]audit.StoredCheckpoint, error)
}

func attachCheckpoints(ctx context.Context, l engine.EventReader, ds []Delivery, lo, hi int64) error {
	cr, ok := l.(CheckpointReader)
	if !ok {
		return engine.Errorf(engine.CodeInvalidArgument, "the store %T claimed checkpoint deliveries but cannot read checkpoints", l)
	}
	cps, err := cr.CheckpointsBetween(ctx, lo, hi)
	if err != nil {
		return err
	}
	bySize := make(map[int64]audit.StoredCheckpoint, len(cps))
	for _, c := range cps {
		bySize[c.Size] = c
	}
	for k := range ds {
		c, ok := bySize[ds[k].RunSeq]
		if !ok || ds[k].EventID != CheckpointEventID(c.Size) {
			return engine.Errorf(engine.CodeStoreCorrupt, "delivery %s of the checkpoint of tree size %d has no stored checkpoint", ds[k].EventID, ds[k].RunSeq)
		}
		rec := NewCheckpointRecord(c)
		ds[k].Checkpoint = &rec
	}
	return nil
}

// IsCheckpointLine reports whether a JSONL sink's line is a checkpoint
// record rather than a run event.
func IsCheckpointLine(line []byte) bool {
	if !bytes.Contains(line, []byte(`"kind"`)) {
		return false
	}
	var k struct {
		Kind string `json:"kind"`
	}
	return json.Unmarshal(line, &k) == nil && k.Kind == CheckpointKind
}
