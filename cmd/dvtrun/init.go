package main

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/dvtrun/dvtrun/engine"
)

// scaffold is the project `dvtrun init` writes; __NAME__ stands for the
// project's name. gitignore becomes .gitignore (embed leaves dot files
// out).
//
//go:embed scaffold
var scaffold embed.FS

// projectName is what a project's name may be: it becomes the planId and
// a schedule's name.
var projectName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

func cmdInit(_ context.Context, c *cli, args []string) error {
	fset := c.newFlagSet("init", "[DIR]", "Create a project in DIR (default: the working directory), as dbt init does: dvtrun.yaml with\n"+
		"a dev and a prod target (SQLite files under DIR/.dvt/), plan.yaml with a seed, a model and a test,\n"+
		"and a .gitignore for .dvt/. It runs at once: cd DIR && dvtrun run plan.yaml.\n"+
		"DIR must be new or empty (a .git directory aside); --force writes into a directory that is not.")
	force := fset.Bool("force", false, "write into a non-empty DIR, replacing the files init writes (a .gitignore is added to, not replaced)")
	name := fset.String("name", "", "the project's `NAME`: its plan id (default: DIR's name)")
	// init reads no configuration: a dvtrun.yaml in a parent directory is
	// no reason to refuse or to say anything.
	c.configSettled = true
	pos, err := c.parse(fset, args, 0, 1)
	if err != nil {
		return err
	}
	dir := "."
	if len(pos) == 1 {
		dir = pos[0]
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return engine.Errorf(engine.CodeInvalidArgument, "init: %s: %v", engine.QuoteText(dir), err)
	}
	if *name == "" {
		*name = nameFromDir(filepath.Base(abs))
	} else if !projectName.MatchString(*name) {
		return engine.Errorf(engine.CodeInvalidArgument, "init: --name %s: use letters, digits, '_', '.' and '-' (at most 64, starting with a letter or digit)", engine.QuoteText(*name))
	}

	files, err := scaffoldFiles(*name)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return engine.Errorf(engine.CodeInvalidArgument, "init: %s is not a directory dvtrun can read: %v", engine.QuoteText(dir), errors.Unwrap(err))
	default:
		var present []string
		for _, e := range entries {
			if e.Name() != ".git" {
				present = append(present, e.Name())
			}
		}
		if len(present) > 0 && !*force {
			shown := present
			if len(shown) > 3 {
				shown = append(slices.Clone(shown[:3]), "…")
			}
			return engine.Errorf(engine.CodeInvalidArgument, "init: %s is not empty (%s): give a new or empty directory, or --force to write into this one (replacing dvtrun.yaml, plan.yaml, seeds/raw_orders.csv and models/orders.sql if they exist)",
				engine.QuoteText(dir), strings.Join(shown, ", "))
		}
	}

	var replaced []string
	for _, f := range files {
		p := filepath.Join(abs, filepath.FromSlash(f.path))
		data := f.data
		old, err := os.ReadFile(p)
		switch {
		case err == nil && f.path == ".gitignore":
			if lines := strings.Fields(string(old)); slices.Contains(lines, ".dvt/") || slices.Contains(lines, ".dvt") {
				continue
			}
			if len(old) > 0 && old[len(old)-1] != '\n' {
				old = append(old, '\n')
			}
			data = append(old, data...)
		case err == nil:
			replaced = append(replaced, f.path)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("init: %w", err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return fmt.Errorf("init: %w", err)
		}
	}
	// The SQLite files of both targets go here.
	if err := os.MkdirAll(filepath.Join(abs, ".dvt"), 0o755); err != nil {
		return fmt.Errorf("init: %w", err)
	}

	w := c.stdout
	fmt.Fprintf(w, "Created project %s in %s\n", *name, c.clean(abs))
	fmt.Fprintln(w, "  dvtrun.yaml           targets dev (the default) and prod: SQLite files under .dvt/")
	fmt.Fprintln(w, "  plan.yaml             a seed, a model and a test: seed.raw_orders, model.orders, test.orders_amount_positive")
	fmt.Fprintln(w, "  seeds/raw_orders.csv  the seed's rows")
	fmt.Fprintln(w, "  models/orders.sql     the model's select")
	fmt.Fprintln(w, "  .gitignore            keeps .dvt/ out of git")
	if len(replaced) > 0 {
		fmt.Fprintf(w, "Replaced (--force): %s\n", strings.Join(replaced, ", "))
	}
	fmt.Fprintln(w, "\nNext:")
	if dir != "." {
		fmt.Fprintf(w, "  cd %s\n", shellQuote(c.clean(dir)))
	}
	fmt.Fprintln(w, "  dvtrun run plan.yaml                  build it on dev")
	fmt.Fprintln(w, "  dvtrun runs                           the runs so far; dvtrun status RUN_ID shows one")
	fmt.Fprintln(w, "  dvtrun ui                             the console at http://127.0.0.1:8080")
	fmt.Fprintln(w, "  dvtrun run plan.yaml --target prod    the same on prod")
	return nil
}

type scaffoldFile struct {
	path string // slash-separated, relative to the project
	data []byte
}

// scaffoldFiles is the project named name, files in a stable order.
func scaffoldFiles(name string) ([]scaffoldFile, error) {
	var out []scaffoldFile
	err := fs.WalkDir(scaffold, "scaffold", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := scaffold.ReadFile(p)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, "scaffold/")
		if rel == "gitignore" {
			rel = ".gitignore"
		}
		out = append(out, scaffoldFile{rel, []byte(strings.ReplaceAll(string(data), "__NAME__", name))})
		return nil
	})
	return out, err
}

// nameFromDir makes a project name of a directory's name: characters a
// name may not have become '_'.
func nameFromDir(base string) string {
	n := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, strings.ToLower(base))
	n = strings.Trim(n, "_.-")
	if len(n) > 64 {
		n = n[:64]
	}
	if !projectName.MatchString(n) {
		return "my_project"
	}
	return n
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
