package sqlstore

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

// Migration is one versioned schema change, read from an embedded NNN_name.sql file.
type Migration struct {
	Version    int
	Name       string
	Statements []string // with {p} still in them
}

// LoadMigrations reads dir's NNN_name.sql files from fsys, sorted by version. Statements are split at
// semicolons that end a line; "--" comment lines are dropped.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration %s: name must be NNN_name.sql", name)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, Statements: SplitStatements(string(b))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := range out {
		if out[i].Version != i+1 {
			return nil, fmt.Errorf("migration %s: versions must be 1, 2, 3, … without gaps", out[i].Name)
		}
	}
	return out, nil
}

// SplitStatements splits a migration file into statements at semicolons that end a line, dropping
// lines that are only "--" comments.
func SplitStatements(src string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(src, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "--") || t == "" {
			continue
		}
		cur.WriteString(line)
		cur.WriteString("\n")
		if strings.HasSuffix(t, ";") {
			s := strings.TrimSpace(cur.String())
			s = strings.TrimSpace(strings.TrimSuffix(s, ";"))
			if s != "" {
				out = append(out, s)
			}
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// DefaultPrefix is the table prefix when the DSN has no ?prefix=.
const DefaultPrefix = "once_"

// TablePrefix turns the value of ?prefix= into a table name prefix: "" (no parameter) →
// DefaultPrefix, "blue" → "blue_". The value follows store.CheckPrefix, the rule every store shares.
func TablePrefix(v string) (string, error) {
	if v == "" {
		return DefaultPrefix, nil
	}
	if err := store.CheckPrefix(v); err != nil {
		return "", err
	}
	return v + "_", nil
}

// Reach opens the pool's first connection within store.Connecting's bound (set: the DSN's own
// connect timeout, 0 for the default), so that an unreachable or frozen server fails Open with
// store.ErrUnavailable in seconds; what names the server in that error. The connection stays in
// the pool for the migration's first query, so this costs no round trip of its own.
func (s *Store) Reach(ctx context.Context, set time.Duration, what string) error {
	cctx, cancel, d := store.Connecting(ctx, set)
	defer cancel()
	c, err := s.DB.Conn(cctx)
	if err == nil {
		return c.Close()
	}
	if cctx.Err() != nil && ctx.Err() == nil {
		return store.Unreached(what, d)
	}
	return s.Dialect.MapError(err)
}
