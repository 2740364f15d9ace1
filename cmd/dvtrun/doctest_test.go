package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReferencesUpToDate: docs/reference/cli.md and config.md are what
// `dvtrun help --markdown` and `dvtrun help config` print, so that a flag
// or a configuration key never changes without its reference.
func TestReferencesUpToDate(t *testing.T) {
	root := repoRoot(t)
	for _, tc := range []struct {
		file string
		args []string
	}{
		{"docs/reference/cli.md", []string{"help", "--markdown"}},
		{"docs/reference/config.md", []string{"help", "config"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			// The caller's environment must not reach the defaults the
			// reference shows.
			var out, errb bytes.Buffer
			env := map[string]string{"DVT_STORE": "sqlite:/elsewhere/state.db", "DVT_TARGET": "nope"}
			if code := run(context.Background(), tc.args, &out, &errb, func(k string) string { return env[k] }); code != 0 {
				t.Fatalf("dvtrun %s: exit %d: %s", strings.Join(tc.args, " "), code, errb.String())
			}
			want, err := os.ReadFile(filepath.Join(root, tc.file))
			if err != nil {
				t.Fatalf("%v: run `make docs`", err)
			}
			if got := out.String(); got != string(want) {
				t.Errorf("%s differs from what `dvtrun %s` prints (%s): run `make docs` and commit the result",
					tc.file, strings.Join(tc.args, " "), firstDifference(string(want), got))
			}
		})
	}
}

// firstDifference names the first line where the file and the output part.
func firstDifference(file, out string) string {
	a, b := strings.Split(file, "\n"), strings.Split(out, "\n")
	for i := 0; i < len(a) || i < len(b); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y || i >= len(a) || i >= len(b) {
			return fmt.Sprintf("line %d: file has %q, dvtrun prints %q", i+1, x, y)
		}
	}
	return "no difference"
}

// docFiles lists the Markdown a user reads: README.md, docs/, examples/
// and plans/, relative to the repository's root.
func docFiles(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	files := []string{"README.md"}
	for _, dir := range []string{"docs", "examples", "plans"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && d.Name() == ".dvt":
				return filepath.SkipDir
			case !d.IsDir() && strings.HasSuffix(p, ".md"):
				rel, err := filepath.Rel(root, p)
				if err != nil {
					return err
				}
				files = append(files, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return files
}

// docBlock is one fenced code block of a Markdown file.
type docBlock struct {
	line int // of the opening fence, 1-based
	info string
	text string
}

// fencedBlocks lists the fenced code blocks of a Markdown text.
func fencedBlocks(text string) []docBlock {
	var out []docBlock
	var cur *docBlock
	var fence string
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if cur == nil {
			for _, f := range []string{"```", "~~~"} {
				if strings.HasPrefix(trimmed, f) {
					fence = trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, f[:1]))]
					cur = &docBlock{line: n, info: strings.TrimSpace(trimmed[len(fence):])}
					break
				}
			}
			continue
		}
		if strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1])) == "" {
			out = append(out, *cur)
			cur = nil
			continue
		}
		cur.text += line + "\n"
	}
	return out
}

// doctestInfo marks a runnable block: ```sh doctest
const doctestInfo = "sh doctest"

// TestDocTests runs every ```sh doctest block of README.md, docs/,
// examples/ and plans/ with bash (set -euo pipefail, -x to show each
// command), the dvtrun built from this repository first on PATH, in a
// scratch directory holding a copy of plans/ and examples/, as a reader
// who copies the commands would. The blocks of one file run in order in
// one directory, so a page can go step by step; a failing block fails
// naming file:line with its output.
func TestDocTests(t *testing.T) {
	bin := buildBinary(t)
	root := repoRoot(t)
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	found := 0
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		var blocks []docBlock
		for _, b := range fencedBlocks(string(data)) {
			if b.info == doctestInfo {
				blocks = append(blocks, b)
			}
		}
		if len(blocks) == 0 {
			continue
		}
		found += len(blocks)
		t.Run(file, func(t *testing.T) {
			dir := t.TempDir()
			for _, sub := range []string{"plans", "examples"} {
				if err := copyTree(filepath.Join(root, sub), filepath.Join(dir, sub)); err != nil {
					t.Fatal(err)
				}
			}
			env := doctestEnv(filepath.Dir(bin))
			for _, b := range blocks {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				// -x traces each command into the output: a failure shows
				// which line of the block failed.
				cmd := exec.CommandContext(ctx, bash, "-c", "set -euo pipefail -x\n"+b.text)
				cmd.Dir, cmd.Env = dir, env
				out, err := cmd.CombinedOutput()
				cancel()
				if err != nil {
					t.Fatalf("%s:%d: the doctest block failed (%v):\n%s\noutput:\n%s", file, b.line, err, b.text, out)
				}
			}
		})
	}
	if found == 0 {
		t.Fatalf("no %q block in README.md, docs/, examples/ or plans/: the harness tests nothing", doctestInfo)
	}
}

// doctestEnv is the test's environment without dvtrun's own variables
// (DVT_STORE and the like would point the examples elsewhere), with the
// directory of the built binary first on PATH and colour off.
func doctestEnv(binDir string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "DVT_") || strings.HasPrefix(kv, "PATH=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"), "NO_COLOR=1")
}

// copyTree copies the files of src into dst, leaving local state (.dvt/)
// out. A missing src copies nothing.
func copyTree(src, dst string) error {
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir() && d.Name() == ".dvt":
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

var (
	// mdLink is an inline link or image: [text](target "title").
	mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// mdRefDef is a reference definition: [label]: target
	mdRefDef = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)`)
	// codeSpan is inline code, whose brackets are no links.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// htmlAnchor is an explicit anchor: <a id="x"> or <a name="x">.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	// mdHeading is an ATX heading.
	mdHeading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
)

// TestDocLinks: every relative link of README.md, docs/, examples/ and
// plans/ leads to a file of the repository, and its #fragment to a heading (or
// an explicit anchor) of that file.
func TestDocLinks(t *testing.T) {
	root := repoRoot(t)
	anchors := map[string]map[string]bool{} // file -> its anchors
	anchorsOf := func(file string) (map[string]bool, error) {
		if a, ok := anchors[file]; ok {
			return a, nil
		}
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(data))
		anchors[file] = a
		return a, nil
	}
	checked := 0
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range proseLines(string(data)) {
			if line == "" {
				continue
			}
			line = codeSpan.ReplaceAllString(line, "")
			var targets []string
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				targets = append(targets, m[1])
			}
			for _, m := range mdRefDef.FindAllStringSubmatch(line, -1) {
				targets = append(targets, m[1])
			}
			for _, target := range targets {
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.ToSlash(filepath.Join(filepath.Dir(file), path))
					if strings.HasPrefix(dest, "../") {
						t.Errorf("%s:%d: link %s leaves the repository", file, n+1, target)
						continue
					}
					st, err := os.Stat(filepath.Join(root, dest))
					if err != nil {
						t.Errorf("%s:%d: link %s: no file %s", file, n+1, target, dest)
						continue
					}
					if st.IsDir() || !strings.HasSuffix(dest, ".md") {
						if frag != "" {
							t.Errorf("%s:%d: link %s: a #fragment into %s, which is no Markdown file", file, n+1, target, dest)
						}
						continue
					}
				}
				if frag == "" {
					continue
				}
				a, err := anchorsOf(dest)
				if err != nil {
					t.Fatal(err)
				}
				if !a[frag] {
					t.Errorf("%s:%d: link %s: %s has no heading #%s", file, n+1, target, dest, frag)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link checked: is the walk broken?")
	}
}

// proseLines is text's lines with those of fenced code blocks emptied,
// line numbers kept.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	for _, b := range fencedBlocks(text) {
		for i := b.line - 1; i < len(lines) && i <= b.line+strings.Count(b.text, "\n"); i++ {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors lists the fragments GitHub gives a Markdown file's
// headings (a repeated one gets -1, -2…) and its explicit anchors.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	for _, line := range proseLines(text) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := mdHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		// A link in a heading counts by its text.
		h := regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(m[1], "$1")
		a := anchor(h)
		if n := count[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		count[a]++
	}
	return out
}

// TestCLIReferenceFindsEverySubcommand: the reference finds a group's
// subcommands in its usage text; here they come from elsewhere, the list
// a group's dispatch names when it meets an unknown one ("want validate,
// show or import-dbt"), so a subcommand left out of the usage is caught.
func TestCLIReferenceFindsEverySubcommand(t *testing.T) {
	sections, err := cliSections(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, s := range sections {
		found[s.h.name] = true
	}
	h := newHarness(t)
	want := regexp.MustCompile(`want ([^()]*)`)
	word := regexp.MustCompile(`\b[a-z][a-z-]*\b`)
	groups := 0
	// A path in a scratch directory: a command that takes a path (init
	// makes its DIR) must write nothing into the source tree.
	nope := filepath.Join(t.TempDir(), "zzz-nope")
	for _, cmd := range commands() {
		r := h.run(cmd.name, nope)
		m := want.FindStringSubmatch(r.stderr)
		if r.code != exitUsage || m == nil || !strings.Contains(r.stderr, "subcommand") && cmd.name != "schedule" {
			continue
		}
		groups++
		for _, sub := range word.FindAllString(m[1], -1) {
			if sub == "or" {
				continue
			}
			if !found[cmd.name+" "+sub] {
				t.Errorf("dvtrun %s %s is not in the command reference (its dispatch says %q)", cmd.name, sub, m[0])
			}
		}
	}
	if groups < 4 || !found["queue cancel"] {
		t.Errorf("found %d command groups (want plan, audit, outbox, schedule) and queue cancel %v", groups, found["queue cancel"])
	}
}
