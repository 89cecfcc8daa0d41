package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/once-run/once/store"
)

var _ store.Inspector = (*Store)(nil)

// Filesystem magic numbers (statfs f_type) of network and FUSE filesystems, on which SQLite's
// file locks cannot be trusted.
var remoteFS = map[int64]string{
	0x6969:     "NFS",
	0x517B:     "SMB",
	0xFE534D42: "SMB2",
	0xFF534D42: "CIFS",
	0x65735546: "FUSE (sshfs or similar)",
	0x01021997: "9P (v9fs)",
	0x00C36400: "CephFS",
	0x5346414F: "AFS",
	0x013111A8: "IBRIX",
	0x47504653: "GPFS",
	0x0BD00BD0: "Lustre",
}

// Inspect reports the schema version, the journal mode and synchronous setting in force, and
// whether the database file lives on a network or FUSE filesystem.
func (s *Store) Inspect(ctx context.Context) ([]store.Finding, error) {
	var out []store.Finding
	add := func(check string, l store.Level, format string, a ...any) {
		out = append(out, store.Finding{Check: check, Level: l, Message: fmt.Sprintf(format, a...)})
	}
	var v int
	if err := s.db.QueryRowContext(ctx, "SELECT value FROM "+s.t.meta+" WHERE key = 'schema_version'").Scan(&v); err != nil {
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
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(s.path), &st); err != nil {
		add("filesystem", store.LevelWarn, "cannot tell the filesystem of %s: %v", filepath.Dir(s.path), err)
	} else if name, ok := remoteFS[int64(st.Type)]; ok {
		add("filesystem", store.LevelFail, "sqlite %s is on %s: SQLite's locks cannot be trusted on a network filesystem; move it to a local disk, or use a server store (postgres, mysql, redis, etcd, zk) to share between machines", s.path, name)
	} else {
		add("filesystem", store.LevelOK, "sqlite %s is on a local filesystem (type %#x)", s.path, st.Type)
	}
	return out, nil
}
