package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
)

// printFlags lists fs's flags as README writes them: --name (a one-letter
// flag keeps its single dash), its argument, its usage and default. The
// flag package's PrintDefaults prints -name, which users then copy.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		arg, usage := flag.UnquoteUsage(f)
		line := "  " + dash + f.Name
		if arg != "" {
			line += " " + arg
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		if d := flagDefault(f, arg); d != "" {
			line += " (default " + d + ")"
		}
		fmt.Fprintln(w, line)
	})
}

// flagDefault is f's default as --help shows it ("" for a zero value),
// quoted when its argument is text.
func flagDefault(f *flag.Flag, arg string) string {
	switch f.DefValue {
	case "", "0", "false", "0s", "[]":
		return ""
	}
	if arg == "string" || arg == "URL" || arg == "FILE" || arg == "DIR" {
		return fmt.Sprintf("%q", f.DefValue)
	}
	return f.DefValue
}

// version is what `dvtrun --version` prints: the module version and the VCS
// revision the binary was built from, as the Go toolchain recorded them.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dvtrun (no build information)"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	out := "dvtrun " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		out += " (revision " + rev
		if at != "" {
			out += ", " + at
		}
		out += dirty + ")"
	}
	return out + " " + info.GoVersion
}

// suggest returns the candidate closest to s by edit distance when it is
// close enough to be a typo (a third of s's length, at least 1), else the
// one candidate s is a prefix of; "" when neither.
func suggest(s string, candidates []string) string {
	best, bestD := "", max(1, len(s)/3)+1
	var prefixed []string
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
		if s != "" && strings.HasPrefix(c, s) {
			prefixed = append(prefixed, c)
		}
	}
	if best == "" && len(prefixed) == 1 {
		return prefixed[0]
	}
	return best
}

// editDistance is the optimal-string-alignment distance between a and b,
// in bytes: Levenshtein's, with a swap of neighbours ("rnu") counting one.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// colorEnabled decides whether output may be coloured: on a terminal only,
// never with NO_COLOR set (https://no-color.org) or TERM=dumb; CLICOLOR_FORCE
// forces it where no terminal is (a pager that understands colour, tests).
func colorEnabled(w io.Writer, env func(string) string) bool {
	if env("NO_COLOR") != "" || env("TERM") == "dumb" {
		return false
	}
	if v := env("CLICOLOR_FORCE"); v != "" && v != "0" {
		return true
	}
	return isTerminal(w)
}

// isTerminal reports whether w is a character device (a terminal), not a
// file, pipe or buffer.
func isTerminal(w io.Writer) bool {
	if n, ok := w.(noteWriter); ok {
		w = n.w
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
