// Package spool is the local durable journal of a run's events that the
// state store has not taken yet: where the runner's writer puts a
// StepStarted that waited longer than the write-latency budget
// (ExecutionSemantics §5, fail open), until it is appended. *Dir satisfies
// runner.Spool.
//
// A Dir keeps one file per run, created by the run's first Put: runs with
// nothing spooled cost no file. A file is JSON lines, one engine.RunEventWrite
// each, in put order; the payload is kept as base64 so that its bytes come
// back exactly (encoding/json would compact and re-escape a RawMessage).
// Put appends whole lines and fsyncs the file, and the directory when it
// created the file, before it returns. A crash mid-Put can leave a torn last
// line: Pending ignores it and the next Put cuts it off, so what survives a
// crash is a prefix of what was put, each event whole. A bad line with lines
// after it is no torn write but damage: STORE_CORRUPT.
package spool

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
)

// Dir is a spool directory. It is safe for concurrent use: Puts of
// different runs proceed in parallel, those of one run in turn. Two
// processes must not spool the same run at once (the run's lease sees to
// that).
type Dir struct {
	dir string

	mu   sync.Mutex
	runs map[string]*runFile
}

// runFile is a run's lock and what this process knows of its file.
type runFile struct {
	mu sync.Mutex
	// whole: the file ends with a whole line this process wrote, so a Put
	// may append without reading it first.
	whole bool
	// dirPending: this process created the file and has not yet made its
	// directory entry durable.
	dirPending bool
}

// Open returns the spool kept in dir. Nothing is created until a run is
// spooled; a path that exists and is not a directory is refused.
func Open(dir string) (*Dir, error) {
	if dir == "" {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "the spool directory is empty")
	}
	switch fi, err := os.Stat(dir); {
	case err == nil && !fi.IsDir():
		return nil, engine.Errorf(engine.CodeInvalidArgument, "spool directory %s is not a directory", dir)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, engine.Errorf(engine.CodeInvalidArgument, "spool directory %s: %v", dir, plan.PathErr(err))
	}
	return &Dir{dir: dir, runs: map[string]*runFile{}}, nil
}

// Path is the directory the spool keeps its files in.
func (d *Dir) Path() string { return d.dir }

// run returns runID's lock and state; entries stay for the life of the Dir
// so that every caller of one run shares one lock.
func (d *Dir) run(runID string) *runFile {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.runs[runID]
	if r == nil {
		r = &runFile{}
		d.runs[runID] = r
	}
	return r
}

// file is runID's file: a readable, portable part of the id and the
// sha256 of all of it, so that no run id, however hostile ("../x", "",
// NUL, 10 KB), names a path outside the directory or collides with
// another (case-insensitive file systems included: the hash is lower-case
// hex of the exact id).
func (d *Dir) file(runID string) string {
	sum := sha256.Sum256([]byte(runID))
	var b strings.Builder
	for _, r := range runID {
		if b.Len() == 40 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return filepath.Join(d.dir, "run-"+b.String()+"-"+hex.EncodeToString(sum[:16])+".jsonl")
}

// Put appends events to runID's file, durably when it returns nil. Every
// event must be of runID. An I/O failure is STORE_UNAVAILABLE: the events
// are not spooled.
func (d *Dir) Put(runID string, events []engine.RunEventWrite) error {
	if runID == "" {
		return engine.Errorf(engine.CodeInvalidArgument, "spool: the run id is empty")
	}
	if len(events) == 0 {
		return nil
	}
	var buf bytes.Buffer
	for i := range events {
		line, err := encodeLine(events[i], runID)
		if err != nil {
			return err
		}
		buf.Write(line)
	}
	r := d.run(runID)
	r.mu.Lock()
	defer r.mu.Unlock()
	path := d.file(runID)
	f, created, err := d.openForAppend(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if created {
		r.dirPending, r.whole = true, true
	}
	if !r.whole {
		if err := repairTail(f, path, runID); err != nil {
			return err
		}
	}
	// Until the write and its fsync succeed the tail is unknown.
	r.whole = false
	if _, err := f.Write(buf.Bytes()); err != nil {
		return unavailable("cannot write the spool file %s: %v", path, err)
	}
	if err := f.Sync(); err != nil {
		return unavailable("cannot fsync the spool file %s: %v", path, err)
	}
	r.whole = true
	if r.dirPending {
		if err := syncDir(d.dir); err != nil {
			return err
		}
		r.dirPending = false
	}
	return nil
}

// openForAppend opens path for appending, creating it (and the spool
// directory) when it is not there.
func (d *Dir) openForAppend(path string) (f *os.File, created bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err == nil {
		return f, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, unavailable("cannot open the spool file %s: %v", path, plan.PathErr(err))
	}
	if err := mkdirDurable(d.dir); err != nil {
		return nil, false, err
	}
	f, err = os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, false, unavailable("cannot create the spool file %s: %v", path, plan.PathErr(err))
	}
	return f, true, nil
}

// repairTail cuts a torn last line off f (left by a crash mid-Put) so that
// the next line starts on a line of its own; a corrupt file is refused.
func repairTail(f *os.File, path, runID string) error {
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return unavailable("cannot read the spool file %s: %v", path, err)
	}
	_, whole, err := decode(data, runID)
	if err != nil {
		return engine.Errorf(engine.CodeStoreCorrupt, "spool file %s: %w", path, err)
	}
	if whole < len(data) {
		if err := f.Truncate(int64(whole)); err != nil {
			return unavailable("cannot cut the torn last line off the spool file %s: %v", path, err)
		}
	}
	return nil
}

// Pending returns runID's spooled events in put order; none when nothing
// is spooled. A torn last line is ignored; any other bad line is
// STORE_CORRUPT, naming the file and the line.
func (d *Dir) Pending(runID string) ([]engine.RunEventWrite, error) {
	if runID == "" {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "spool: the run id is empty")
	}
	r := d.run(runID)
	r.mu.Lock()
	defer r.mu.Unlock()
	path := d.file(runID)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable("cannot read the spool file %s: %v", path, plan.PathErr(err))
	}
	events, _, err := decode(data, runID)
	if err != nil {
		return nil, engine.Errorf(engine.CodeStoreCorrupt, "spool file %s: %w", path, err)
	}
	return events, nil
}

// Clear removes runID's file, durably when it returns nil; call it once
// every pending event is stored. It removes every event of the run,
// including any put after the Pending whose events the caller stored: the
// caller puts nothing in between (the run's one writer). Clearing a run
// with nothing spooled does nothing.
func (d *Dir) Clear(runID string) error {
	if runID == "" {
		return engine.Errorf(engine.CodeInvalidArgument, "spool: the run id is empty")
	}
	r := d.run(runID)
	r.mu.Lock()
	defer r.mu.Unlock()
	path := d.file(runID)
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return unavailable("cannot remove the spool file %s: %v", path, plan.PathErr(err))
	}
	r.whole, r.dirPending = false, false
	return syncDir(d.dir)
}

// mkdirDurable creates dir and its missing parents, fsyncing the parent of
// each directory it creates so that the entries survive a crash.
func mkdirDurable(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return unavailable("spool directory %s is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return unavailable("spool directory %s: %v", dir, plan.PathErr(err))
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirDurable(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return unavailable("cannot create the spool directory %s: %v", dir, plan.PathErr(err))
	}
	return syncDir(parent)
}

// syncDir makes dir's entries (a file created or removed) durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return unavailable("cannot open the spool directory %s: %v", dir, plan.PathErr(err))
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return unavailable("cannot fsync the spool directory %s: %v", dir, err)
	}
	return nil
}

func unavailable(format string, args ...any) error {
	return engine.Errorf(engine.CodeStoreUnavailable, format, args...)
}

// line is a spooled event as written: the payload as base64, so that its
// bytes are kept exactly.
type line struct {
	engine.RunEventWrite
	Payload []byte `json:"payload,omitempty"`
}

// encodeLine is ev as one line, newline included.
func encodeLine(ev engine.RunEventWrite, runID string) ([]byte, error) {
	if err := check(ev, runID); err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "spool: %w", err)
	}
	b, err := json.Marshal(line{RunEventWrite: ev, Payload: ev.Payload})
	if err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "spool: event %s does not encode: %w", ev.EventID, err)
	}
	return append(b, '\n'), nil
}

// check is what every spooled event must have, on the way in and out.
func check(ev engine.RunEventWrite, runID string) error {
	switch {
	case ev.RunID != runID:
		return fmt.Errorf("event %q is of run %q, not %q", ev.EventID, ev.RunID, runID)
	case ev.EventID == "" || ev.EventType == "" || ev.IdempotencyKey == "":
		return fmt.Errorf("event %q lacks its eventId, eventType or idempotencyKey", ev.EventID)
	}
	// A time JSON reads but cannot write back (offset +24:00) would make
	// the event unstorable.
	if _, err := ev.EmittedAt.MarshalText(); err != nil {
		return fmt.Errorf("event %q: emittedAt: %v", ev.EventID, err)
	}
	return nil
}

// decode reads a spool file's lines: the events of its whole lines and how
// many bytes those lines take. The last line is torn (ignored) when it
// lacks its newline or does not decode: a crash mid-Put leaves that, and
// that Put did not return. A line that does not decode with lines after it
// is an error naming the line.
func decode(data []byte, runID string) (events []engine.RunEventWrite, whole int, err error) {
	for n := 1; whole < len(data); n++ {
		i := bytes.IndexByte(data[whole:], '\n')
		if i < 0 {
			break // torn: the newline is written last
		}
		ev, lerr := decodeLine(data[whole:whole+i], runID)
		if lerr != nil {
			if whole+i+1 == len(data) {
				break // torn last line
			}
			return nil, 0, fmt.Errorf("line %d is corrupt and is not the last line, so no torn write: %v", n, lerr)
		}
		events = append(events, ev)
		whole += i + 1
	}
	return events, whole, nil
}

// decodeLine decodes one line without its newline: one JSON object, no
// unknown fields, nothing after it.
func decodeLine(b []byte, runID string) (engine.RunEventWrite, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var l line
	if err := dec.Decode(&l); err != nil {
		return engine.RunEventWrite{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return engine.RunEventWrite{}, errors.New("data after the event")
	}
	ev := l.RunEventWrite
	ev.Payload = l.Payload
	if err := check(ev, runID); err != nil {
		return engine.RunEventWrite{}, err
	}
	return ev, nil
}
