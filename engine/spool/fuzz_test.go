package spool

import (
	"bytes"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

// FuzzDecode: the line decoder never panics; what it accepts is a prefix
// of whole lines followed by at most one torn line, reads back the same
// from that prefix alone, and survives a re-encode and one more put.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		events, whole, err := decode(data, "r")
		if err != nil {
			if engine.CodeOf(err) != "" || bytes.Contains([]byte(err.Error()), []byte("\n")) {
				t.Fatalf("decode error %q: want one plain line (callers add the code)", err)
			}
			return
		}
		if whole > len(data) || (whole > 0 && data[whole-1] != '\n') {
			t.Fatalf("whole = %d of %d bytes, not at a line end", whole, len(data))
		}
		if i := bytes.IndexByte(data[whole:], '\n'); i >= 0 && i != len(data)-whole-1 {
			t.Fatalf("more than one line after the whole ones: %q", data[whole:])
		}
		again, w2, err := decode(data[:whole], "r")
		if err != nil || w2 != whole || len(again) != len(events) {
			t.Fatalf("the whole prefix decodes to %d events, %d bytes, %v; want %d, %d", len(again), w2, err, len(events), whole)
		}
		var enc []byte
		for _, ev := range append(events, event("r", 0)) {
			l, err := encodeLine(ev, "r")
			if err != nil {
				t.Fatalf("accepted event does not encode: %v", err)
			}
			enc = append(enc, l...)
		}
		round, w3, err := decode(enc, "r")
		if err != nil || w3 != len(enc) {
			t.Fatalf("re-encoded events: %v, %d of %d bytes", err, w3, len(enc))
		}
		sameEvents(t, round, append(events, event("r", 0)))
	})
}
