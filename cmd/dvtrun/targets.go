package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/config"
)

// configFileName is the configuration file found without --config, in the
// working directory or the nearest parent that has one.
const configFileName = "dvtrun.yaml"

// chosenTarget is the config target a command works on.
type chosenTarget struct {
	name string
	t    config.Target // store and warehouse resolved against the file's directory
}

// findConfig looks for dvtrun.yaml in dir and its parents.
func findConfig(dir string) (string, bool) {
	for {
		p := filepath.Join(dir, configFileName)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// applyTarget settles, once per command, which configuration file it reads
// and which target it runs on, and applies the target: its store,
// warehouse and environment replace the environment variables' and the
// defaults (a flag still wins), its threads --threads' default. fs is the
// command's flag set. The file and target are named on stderr, once, so
// that a discovered file never acts unseen.
func (c *cli) applyTarget(fs *flag.FlagSet) error {
	if !c.configSettled {
		c.configSettled = true
		if c.g.config == "" {
			if wd, err := os.Getwd(); err == nil {
				if p, ok := findConfig(wd); ok {
					c.g.config, c.configFound = p, true
				}
			}
		}
		t, err := c.chooseTarget()
		if err != nil {
			return err
		}
		c.target = t
		switch {
		case t != nil:
			c.setConfigNote(fmt.Sprintf("config %s, target %s", c.g.config, t.name))
		case c.configFound:
			c.setConfigNote("config " + c.g.config)
		}
	}
	t := c.target
	if t == nil {
		return nil
	}
	if !c.g.flagged["store"] {
		c.g.store = t.t.Store
	}
	if !c.g.flagged["warehouse"] {
		c.g.warehouse = t.t.Warehouse
	}
	if !c.g.flagged["environment"] {
		c.g.environment = t.t.Environment
		c.g.scoped["environment"] = true
	}
	if f := fs.Lookup("threads"); f != nil && t.t.Threads > 0 && !flagSet(fs, "threads") {
		if err := fs.Set("threads", strconv.Itoa(t.t.Threads)); err != nil {
			return err
		}
	}
	return nil
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// chooseTarget reads the configuration's targets: --target (DVT_TARGET),
// else the file's target:. nil when the file has no targets.
func (c *cli) chooseTarget() (*chosenTarget, error) {
	name := c.g.target
	if c.g.config == "" {
		if name != "" && !c.targetIsFilter {
			return nil, engine.Errorf(engine.CodeConfigInvalid, "--target %s: no configuration file (%s here or in a parent directory, or --config)", engine.QuoteText(name), configFileName)
		}
		return nil, nil
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return nil, err
	}
	if len(cfg.Targets) == 0 {
		if name != "" && !c.targetIsFilter {
			return nil, engine.Errorf(engine.CodeConfigInvalid, "--target %s: %s has no targets", engine.QuoteText(name), c.g.config)
		}
		return nil, nil
	}
	if name == "" {
		name = cfg.Target
	} else if cfg.Targets[name] == nil && c.targetIsFilter {
		name = cfg.Target // a filter by a target the file no longer has
	}
	if name == "" {
		return nil, engine.Errorf(engine.CodeConfigInvalid, "%s has targets (%s) but no default target: set target: in the file, or --target", c.g.config, strings.Join(cfg.TargetNames(), ", "))
	}
	t, err := c.resolveTarget(cfg, name)
	if err != nil {
		return nil, err
	}
	return &chosenTarget{name: name, t: t}, nil
}

// resolveTarget is target name of cfg with its SQLite paths read from the
// configuration file's directory, wherever the command runs.
func (c *cli) resolveTarget(cfg *config.Config, name string) (config.Target, error) {
	t := cfg.Targets[name]
	if t == nil {
		return config.Target{}, engine.Errorf(engine.CodeConfigInvalid, "--target %s is not one of the targets of %s (%s)", engine.QuoteText(name), c.g.config, strings.Join(cfg.TargetNames(), ", "))
	}
	r := *t
	r.Store = c.relativeURL(r.Store)
	r.Warehouse = c.relativeURL(r.Warehouse)
	return r, nil
}

// relativeURL makes an SQLite URL's relative path relative to the
// configuration file; other URLs are returned as they are.
func (c *cli) relativeURL(raw string) string {
	for _, prefix := range []string{"sqlite://", "sqlite:", ""} {
		if prefix == "" && strings.Contains(raw, ":") {
			return raw
		}
		if p, ok := strings.CutPrefix(raw, prefix); ok {
			return prefix + relativeTo(c.g.config, p)
		}
	}
	return raw
}

// The config note names the file and target a command uses. It is printed
// on stderr just before the command's first output (on stdout or stderr),
// and a command that fails before any output carries it at the end of its
// one error line instead, so failures stay one line.
type noteWriter struct {
	w io.Writer
	c *cli
}

func (n noteWriter) Write(p []byte) (int, error) {
	n.c.flushConfigNote()
	return n.w.Write(p)
}

func (c *cli) setConfigNote(note string) {
	c.noteMu.Lock()
	defer c.noteMu.Unlock()
	c.configNote = note
}

// takeConfigNote returns the pending note and forgets it.
func (c *cli) takeConfigNote() string {
	c.noteMu.Lock()
	defer c.noteMu.Unlock()
	n := c.configNote
	c.configNote = ""
	return n
}

func (c *cli) flushConfigNote() {
	if n := c.takeConfigNote(); n != "" {
		fmt.Fprintln(c.rawStderr, "dvtrun: "+c.clean(n))
	}
}

// otherTarget is a config target besides the command's, as a listing
// command names it.
type otherTarget struct {
	name, environment string
	sameStore         bool // its runs are in the command's state store
}

// otherTargets are the config's targets but the command's, by name.
func (c *cli) otherTargets() []otherTarget {
	if c.target == nil {
		return nil
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return nil
	}
	var out []otherTarget
	for _, name := range cfg.TargetNames() {
		if name == c.target.name {
			continue
		}
		t, err := c.resolveTarget(cfg, name)
		if err != nil {
			continue
		}
		out = append(out, otherTarget{name: name, environment: t.Environment, sameStore: t.Store == c.g.store})
	}
	return out
}

// noteScope makes the config note of a command that lists one target's
// store and environment (queue, runs, schedule list) say which it shows
// and how to see the others. The note goes to stderr, never into --json.
func (c *cli) noteScope(command string) {
	if c.target == nil {
		return
	}
	note := fmt.Sprintf("config %s, target %s (environment %s)", c.g.config, c.target.name, c.g.environment)
	if others := c.otherTargets(); len(others) > 0 {
		names := make([]string, len(others))
		for i, o := range others {
			names[i] = o.name
		}
		note += fmt.Sprintf("; other targets: %s (dvtrun %s --target NAME)", strings.Join(names, ", "), command)
	}
	c.setConfigNote(note)
}

// hintOtherTargets says, on stderr, which other targets of the same store
// hold what a listing of this target did not show: counts maps an
// environment to how many items it holds.
func (c *cli) hintOtherTargets(command, items string, counts map[string]int) {
	for _, o := range c.otherTargets() {
		if n := counts[o.environment]; o.sameStore && o.environment != c.g.environment && n > 0 {
			fmt.Fprintf(c.stderr, "dvtrun: %d %s of target %s (environment %s) are in this store: dvtrun %s --target %s\n", n, items, o.name, o.environment, command, o.name)
		}
	}
}
