package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/once-run/once/internal/cli"
)

// manPages writes a gzipped man page per command of once's command tree into dir (once.1.gz,
// once-run.1.gz, …) and returns their names, sorted. The pages carry the commit's date, not
// today's, and no "auto generated on" line, so that they are the same bytes on every build.
func manPages(dir string, s stamp) ([]string, error) {
	root := cli.Command()
	noAutoGenTag(root)
	raw := filepath.Join(dir, "raw")
	if err := os.MkdirAll(raw, 0o755); err != nil {
		return nil, err
	}
	date := s.Date
	header := &doc.GenManHeader{Section: "1", Date: &date, Source: "once " + s.Version, Manual: "once manual"}
	if err := doc.GenManTreeFromOpts(root, doc.GenManTreeOptions{Header: header, Path: raw, CommandSeparator: "-"}); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(raw)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		page, err := os.ReadFile(filepath.Join(raw, e.Name()))
		if err != nil {
			return nil, err
		}
		gz, err := gzipBest(page)
		if err != nil {
			return nil, err
		}
		name := e.Name() + ".gz"
		if err := os.WriteFile(filepath.Join(dir, name), gz, 0o644); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names, os.RemoveAll(raw)
}

func noAutoGenTag(c *cobra.Command) {
	c.DisableAutoGenTag = true
	for _, sub := range c.Commands() {
		noAutoGenTag(sub)
	}
}

// gzipBest compresses at the best level with no name and no time in the header (gzip -9n), as
// Debian wants its man pages and changelogs.
func gzipBest(data []byte) ([]byte, error) {
	var b bytes.Buffer
	w, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// completions are the shell completion scripts of once's command tree, by shell. Each asks the
// binary (once __complete …) for its candidates, so they stay right for the installed version.
func completions() (map[string][]byte, error) {
	root := cli.Command()
	var bash, zsh, fish bytes.Buffer
	if err := root.GenBashCompletionV2(&bash, true); err != nil {
		return nil, err
	}
	if err := root.GenZshCompletion(&zsh); err != nil {
		return nil, err
	}
	if err := root.GenFishCompletion(&fish, true); err != nil {
		return nil, err
	}
	return map[string][]byte{"bash": bash.Bytes(), "zsh": zsh.Bytes(), "fish": fish.Bytes()}, nil
}
