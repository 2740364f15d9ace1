package main

import (
	"fmt"
	"strings"
)

// terminalSafe escapes control characters (C0, DEL, C1) as \xNN so that
// text read from the store — step ids, reasons, actor names — cannot move
// the cursor or rewrite the screen of whoever follows a run.
//
// A minimal local version: the i8-hygiene branch brings the project's
// console escaping function, which replaces this one when both land.
func terminalSafe(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isControl(r) {
			fmt.Fprintf(&b, `\x%02x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }
