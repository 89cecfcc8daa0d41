package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/once-run/once/internal/trust"
	"github.com/once-run/once/store"
)

var _ store.Inspector = (*Store)(nil)

// Inspect reports who may write the ledger's files, the ledger's id and write count, the
// schema version, the journal mode and synchronous setting in force, and whether the database
// file lives on a network or FUSE filesystem. (Problems with the files or a lost ledger make
// Open fail; doctor reports that error.)
func (s *Store) Inspect(ctx context.Context) ([]store.Finding, error) {
	var out []store.Finding
	add := func(check string, l store.Level, format string, a ...any) {
		out = append(out, store.Finding{Check: check, Level: l, Message: fmt.Sprintf(format, a...)})
	}
	if _, err := s.checkTrust(); err != nil {
		add("files", store.LevelFail, "%v", err)
	} else if s.pol.Shared {
		add("files", store.LevelOK, "%s and its files are shared with the members of group %d (?group=), and nobody else can change them", filepath.Dir(s.path), s.pol.Group)
	} else {
		owner := uint32(os.Geteuid())
		if s.pol.Reader {
			owner = s.pol.Owner
		}
		add("files", store.LevelOK, "%s and its files can be changed by uid %d (and root) only", filepath.Dir(s.path), owner)
	}
	if s.ro != nil {
		// A read-only file system stops every run here; a user who may only read is expected.
		l := store.LevelWarn
		if s.ro.rofs {
			l = store.LevelFail
		}
		add("access", l, "sqlite %s opened read-only (%s): reading the ledger works, runs and every other write fail; fix: %s", s.path, s.ro.why, s.ro.fix())
	}
	if err := s.still(); err != nil {
		add("ledger", store.LevelFail, "%v", err)
	} else {
		var seq int64
		if err := s.db.QueryRowContext(ctx, "SELECT seq FROM "+ledgerTable).Scan(&seq); err != nil {
			return nil, s.mapErr(err)
		}
		old := trust.Quote(filepath.Join(filepath.Dir(s.path), "old-ledger-"+time.Now().Format("20060102-150405")))
		add("ledger", store.LevelOK, "ledger %s, %d writes; %s tells a deleted, emptied or replaced file from a new ledger. To start a new, empty ledger on purpose, move the files aside: mkdir -m 700 %s && mv %s %s %s/",
			s.id, seq, MarkerPath(s.path), old, trust.Quote(s.path)+"*", trust.Quote(MarkerPath(s.path)), old)
	}
	v, err := s.t.schemaVersion(ctx, s.db)
	if err != nil {
		return nil, s.mapErr(err)
	}
	if v == SchemaVersion {
		add("schema", store.LevelOK, "sqlite schema version %d (current)", v)
	} else {
		add("schema", store.LevelFail, "sqlite schema version %d, this once understands %d: upgrade once", v, SchemaVersion)
	}
	var mode string
	var sync int
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return nil, s.mapErr(err)
	}
	if err := s.db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
		return nil, s.mapErr(err)
	}
	syncName := map[int]string{0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[sync]
	switch {
	case strings.EqualFold(mode, "wal") && sync >= 2:
		add("durability", store.LevelOK, "sqlite %s: journal_mode=%s, synchronous=%s: every change is on disk when the call returns", s.path, mode, syncName)
	case sync < 2:
		add("durability", store.LevelWarn, "sqlite %s: synchronous=%s: a power loss can undo recorded outcomes; once sets FULL itself, so something else changed it", s.path, syncName)
	default:
		add("durability", store.LevelWarn, "sqlite %s: journal_mode=%s, not WAL: readers block writers", s.path, mode)
	}
	switch remote, kind, err := filesystem(filepath.Dir(s.path)); {
	case err != nil:
		add("filesystem", store.LevelWarn, "cannot tell the filesystem of %s: %v", filepath.Dir(s.path), err)
	case remote != "":
		add("filesystem", store.LevelFail, "sqlite %s is on %s: SQLite's locks cannot be trusted on a network filesystem; move it to a local disk, or use a server store (postgres, mysql, redis, etcd, zk) to share between machines", s.path, remote)
	default:
		add("filesystem", store.LevelOK, "sqlite %s is on a local filesystem (%s)", s.path, kind)
	}
	return out, nil
}
