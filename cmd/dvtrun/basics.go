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
