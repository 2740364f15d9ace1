package delivery

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/dvtrun/dvtrun/engine"
)

// jsonlBatch is how many events one write and fsync carries: the batch is
// the unit a crash may repeat.
const jsonlBatch = 256

// JSONL appends one RunEventRecord JSON per line to a file and syncs it to
// disk before the events count as delivered.
type JSONL struct {
	path string
	mu   sync.Mutex
	f    syncFile
}

// syncFile is what JSONL needs of its file (tests inject failures).
type syncFile interface {
	Write(p []byte) (int, error)
	Sync() error
	Close() error
}

// OpenJSONL opens (creating it and its directory) the file for appending.
func OpenJSONL(path string) (*JSONL, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, engine.Errorf(engine.CodeConfigInvalid, "jsonl sink: cannot create %s: %v", dir, err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, engine.Errorf(engine.CodeConfigInvalid, "jsonl sink: cannot open %s: %v", path, err)
	}
	return &JSONL{path: path, f: f}, nil
}

// MaxBatch implements Sink.
func (j *JSONL) MaxBatch() int { return jsonlBatch }

// Deliver implements Sink: one write of all lines, then fsync. Nothing
// counts as delivered unless the sync succeeded.
func (j *JSONL) Deliver(_ context.Context, events []engine.RunEventRecord) (int, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // Encode ends each record with '\n'
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return 0, err
		}
	}
	if err := j.appendSynced(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(events), nil
}

// DeliverCheckpoints implements CheckpointSink: the checkpoint records as
// lines among the events', written and synced the same way.
func (j *JSONL) DeliverCheckpoints(_ context.Context, cps []CheckpointRecord) (int, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, c := range cps {
		if err := enc.Encode(c); err != nil {
			return 0, err
		}
	}
	if err := j.appendSynced(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(cps), nil
}

// appendSynced appends lines (each ending in '\n') in one write and syncs
// the file.
func (j *JSONL) appendSynced(lines []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return fmt.Errorf("jsonl sink %s is closed", j.path)
	}
	if _, err := j.f.Write(lines); err != nil {
		return fmt.Errorf("append to %s: %w", j.path, err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", j.path, err)
	}
	return nil
}

// Close closes the file.
func (j *JSONL) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// ReadJSONL reads back a JSONL sink's run events: one record per line, in
// order (checkpoint lines are left out; ReadJSONLCheckpoints has them).
func ReadJSONL(path string) ([]engine.RunEventRecord, error) {
	var out []engine.RunEventRecord
	err := scanJSONL(path, func(line []byte) error {
		if IsCheckpointLine(line) {
			return nil
		}
		var r engine.RunEventRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// ReadJSONLCheckpoints reads back a JSONL sink's checkpoint records, in
// order.
func ReadJSONLCheckpoints(path string) ([]CheckpointRecord, error) {
	var out []CheckpointRecord
	err := scanJSONL(path, func(line []byte) error {
		if !IsCheckpointLine(line) {
			return nil
		}
		var c CheckpointRecord
		if err := json.Unmarshal(line, &c); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

func scanJSONL(path string, fn func(line []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 64<<20) // an event's payload may be large
	for line := 1; sc.Scan(); line++ {
		if err := fn(sc.Bytes()); err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
	}
	return sc.Err()
}
