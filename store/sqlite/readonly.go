package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/once-run/once/internal/trust"
	"github.com/once-run/once/store"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Reading a ledger this process cannot write.
//
// Open opens the database read-write, and the writers' queue and the marker for writing, even for
// a command that only reads: on a file system remounted read-only (a disk error at 3 a.m.), or for
// a user who may read the ledger but not write it (monitoring), it failed, just when someone needs
// to read the ledger. OpenReader, for the commands that only read, opens it as Open does when this
// process can write its files, else read-only: SQLite's mode=ro, no writers' queue, the marker read
// and compared but never written, the schema read but never created or upgraded (an older one is
// refused, with the fix). Every write through such a store fails with store.ErrUnavailable.
//
// WAL (https://www.sqlite.org/wal.html, "Read-Only Databases"): a read-only connection to a WAL
// database needs the -shm file, which it cannot create here. once keeps the -wal and -shm files
// (persistWAL), so they are normally there; SQLite then maps the -shm read-only, or, when no
// writer holds it, rebuilds the WAL index from the -wal file in its own memory, and reads the
// writes the -wal holds. Without a -shm file, SQLite cannot read the database at all, unless it is
// opened immutable=1, which skips locking and ignores the -wal file: safe only where nobody can
// write (a read-only file system itself, not a read-only bind mount of one written elsewhere) and nothing is in the -wal (missing or empty) — else it would
// read an older ledger without a word. In every other case the open fails with the way to read a
// copy instead: the answer is never silently empty or old.

// readOnly is why a store was opened read-only.
type readOnly struct {
	why  string // "the file system is read-only", "uid 1001 cannot write …"
	rofs bool   // the file system is read-only: no writer can exist
}

// refuse is the error of a write through a store opened read-only.
func (r *readOnly) refuse(path string) error {
	return fmt.Errorf("%w: sqlite %s: opened read-only (%s), so this command can read the ledger but not change it; fix: %s",
		store.ErrUnavailable, path, r.why, r.fix())
}

func (r *readOnly) fix() string {
	if r.rofs {
		return "remount the file system read-write"
	}
	return "run the command as the ledger's owner"
}

// OpenReader opens the SQLite store at path for a command that only reads: as Open does when
// this process can write the ledger's files (creating it when missing), else read-only (see
// above). A ledger that is missing, or that cannot be read read-only, is an error wrapping
// store.ErrUnavailable that says why and what to do, never an empty store.
func OpenReader(ctx context.Context, path string, opts Options) (*Store, error) {
	s, err := newStore(path, opts)
	if err != nil {
		return nil, err
	}
	if ro := cannotWrite(s.path); ro != nil {
		s.ro = ro
		return s.openReadOnly(ctx)
	}
	return s.open(ctx)
}

// cannotWrite says why this process cannot write the ledger at path, or nil when, as far as the
// file system and the files' modes tell, it can (Open reports anything else).
func cannotWrite(path string) *readOnly {
	dir := filepath.Dir(path)
	check := func(p string) (*readOnly, bool) {
		err := unix.Faccessat(unix.AT_FDCWD, p, unix.W_OK, unix.AT_EACCESS)
		switch {
		case err == nil:
			return nil, true
		case errors.Is(err, unix.ENOENT):
			return nil, false
		case errors.Is(err, unix.EROFS):
			return &readOnly{why: "the file system is read-only", rofs: true}, true
		}
		return &readOnly{why: fmt.Sprintf("uid %d cannot write %s", os.Geteuid(), p)}, true
	}
	if _, exists := check(dir); !exists {
		return nil // Open creates it, or says why it cannot
	}
	missing := false
	for _, p := range []string{path, path + "-wal", path + "-shm", QueuePath(path), MarkerPath(path)} {
		ro, exists := check(p)
		if ro != nil {
			return ro
		}
		missing = missing || !exists
	}
	if missing {
		ro, _ := check(dir)
		return ro
	}
	return nil
}

// othersLedger says whether the ledger's directory belongs to another user than this one, and a
// reader would trust the ledger as that user's (OpenReader): not one a third user could have
// made or changed, whose trust check's line must stay.
func (s *Store) othersLedger() bool {
	var st unix.Stat_t
	if unix.Stat(filepath.Dir(s.path), &st) != nil || st.Uid == uint32(os.Geteuid()) || s.pol.Shared {
		return false
	}
	pol := s.pol
	pol.Reader, pol.Owner = true, st.Uid
	_, err := s.checkTrustWith(pol)
	return err == nil
}

// openReadOnly opens s, whose s.ro says why, read-only.
func (s *Store) openReadOnly(ctx context.Context) (*Store, error) {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Dir(s.path), &st); err == nil && !s.pol.Shared {
		// The ledger may be another user's: this process only reads it.
		s.pol.Reader, s.pol.Owner = true, st.Uid
	}
	dirExists, err := s.checkTrust()
	if err != nil {
		return nil, err
	}
	var m *marker
	if dirExists {
		if m, err = readMarker(MarkerPath(s.path)); err != nil {
			fix := ""
			if errors.Is(err, os.ErrPermission) {
				fix = "; fix: make it readable by this user (chmod 644 " + trust.Quote(MarkerPath(s.path)) + ")"
			}
			return nil, fmt.Errorf("%w: sqlite %s: %s%s", store.ErrUnavailable, s.path, oneLine(err.Error()), fix)
		}
		if err := s.checkPresent(m); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(s.path); err != nil {
		return nil, s.noLedger(err)
	}
	dsn, err := s.readOnlyDSN()
	if err != nil {
		return nil, err
	}
	if s.db, err = sql.Open("sqlite", dsn); err != nil {
		return nil, s.mapErr(err)
	}
	s.db.SetMaxOpenConns(1)
	seq, err := s.readSchema(ctx, m != nil)
	if err == nil && m != nil {
		err = s.compareMarker(m, s.id, seq, true)
	}
	if err == nil {
		err = s.remember()
	}
	if err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// cantOpen says whether err is SQLite's SQLITE_CANTOPEN or SQLITE_PERM (a file it cannot open).
func cantOpen(err error) bool {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code() & 0xff
	return c == sqlite3.SQLITE_CANTOPEN || c == sqlite3.SQLITE_PERM
}

// noLedger is the error of a read-only open that finds no ledger file: nothing to read, and it
// cannot be created.
func (s *Store) noLedger(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: sqlite %s: no ledger here, and none can be created (%s); fix: point ONCE_HOME or --store at the ledger the jobs write", store.ErrUnavailable, s.path, s.ro.why)
	}
	return fmt.Errorf("%w: sqlite %s: %s", store.ErrUnavailable, s.path, oneLine(unwrapPathErr(err).Error()))
}

// readOnlyDSN is the driver's name for a read-only connection: mode=ro, and immutable=1 where
// that is safe (see above); an error, with the way to read a copy, where SQLite cannot read the
// file read-only.
func (s *Store) readOnlyDSN() (string, error) {
	size := func(p string) (int64, bool) {
		fi, err := os.Stat(p)
		if err != nil {
			return 0, false
		}
		return fi.Size(), true
	}
	wal, hasWAL := size(s.path + "-wal")
	journal, _ := size(s.path + "-journal")
	_, shm := size(s.path + "-shm")
	// immutable only where SQLite cannot read the file otherwise (a -shm or -wal file missing), and
	// only where nobody can write: the file system itself read-only, not a read-only bind mount of
	// one written elsewhere (immutable reads without locks and never looks at the -wal file again).
	immutable := s.ro.rofs && wal == 0 && journal == 0 && (!shm || !hasWAL) && superReadOnly(filepath.Dir(s.path))
	if missing := map[bool]string{!shm: "-shm", !hasWAL: "-wal"}[true]; missing != "" && !immutable && walMode(s.path) {
		// SQLite needs both to read a WAL database, and cannot create them here.
		what, fix := "its -wal file holds writes not yet copied into it", ""
		switch {
		case !s.ro.rofs:
			what, fix = "this user cannot create it", "run any once command as the ledger's owner (it makes the file), or "
		case wal == 0 && journal == 0:
			what = "this read-only mount is a view of a file system that may be written through another mount (a bind mount), whose writes it would not see"
		}
		files := trust.Quote(s.path)
		if hasWAL {
			files += " and " + trust.Quote(s.path+"-wal")
		}
		return "", fmt.Errorf("%w: sqlite %s: cannot be read read-only (%s): its %s file is missing and %s; fix: %scopy %s into a directory of yours and read the copy (--store sqlite:///DIR/%s)",
			store.ErrUnavailable, s.path, s.ro.why, missing, what, fix, files, filepath.Base(s.path))
	}
	q := "mode=ro"
	if immutable {
		q += "&immutable=1"
	}
	return fmt.Sprintf("file:%s?%s&_pragma=busy_timeout(%d)&_pragma=query_only(1)",
		(&url.URL{Path: s.path}).EscapedPath(), q, s.busy.Milliseconds()), nil
}

// walMode says whether the database file's header says WAL (its read and write versions, bytes
// 18 and 19, are 2), or cannot be read (then SQLite says why). A file in another journal mode (one
// made where shared memory failed) needs no -wal or -shm file.
func walMode(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return true
	}
	defer f.Close()
	var h [20]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return true
	}
	return h[18] == 2 || h[19] == 2
}

// readSchema reads the schema version, the ledger id (into s.id) and the write counter of a
// ledger opened read-only: it cannot create or upgrade anything, so a file without the current
// schema is refused, saying why.
func (s *Store) readSchema(ctx context.Context, hasMarker bool) (int64, error) {
	var v, seq int64
	err := s.db.QueryRowContext(ctx, "SELECT m.value, l.id, l.seq FROM "+s.t.meta+" m, "+ledgerTable+" l WHERE m.key = 'schema_version'").Scan(&v, &s.id, &seq)
	switch {
	case cantOpen(err):
		return 0, fmt.Errorf("%w: sqlite %s: cannot be read read-only (%s): %s; fix: make it and its -wal and -shm files readable by this user (chmod 644 %s %s %s)",
			store.ErrUnavailable, s.path, s.ro.why, oneLine(err.Error()), trust.Quote(s.path), trust.Quote(s.path+"-wal"), trust.Quote(s.path+"-shm"))
	case err == nil && v == SchemaVersion:
		if !validID(s.id) {
			return 0, s.gone("its once_ledger table holds %q, not a ledger id; fix: restore the file from a backup", s.id)
		}
		return seq, nil
	case err == nil && v > SchemaVersion:
		return 0, fmt.Errorf("%w: sqlite %s: schema version %d, this once understands %d; upgrade once", store.ErrUnavailable, s.path, v, SchemaVersion)
	case err == nil:
		return 0, fmt.Errorf("%w: sqlite %s: schema version %d, older than this once's %d, and it cannot be upgraded read-only (%s); fix: run once doctor once where the ledger can be written (it upgrades the file), or read it with the once that wrote it",
			store.ErrUnavailable, s.path, v, SchemaVersion, s.ro.why)
	case errors.Is(err, sql.ErrNoRows):
		return 0, s.mapErr(err)
	}
	var n int
	if qerr := s.db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN (?, ?)", ledgerTable, s.t.meta).Scan(&n); qerr != nil || n == 2 {
		return 0, s.mapErr(err)
	}
	if hasMarker {
		return 0, s.gone("the file holds no once ledger, but %s records one here (emptied, or replaced by another database?); %s", MarkerPath(s.path), s.restoreOrNew())
	}
	return 0, fmt.Errorf("%w: sqlite %s: holds no once ledger (with prefix %q), and none can be created (%s); fix: point ONCE_HOME or --store at the ledger the jobs write", store.ErrUnavailable, s.path, s.t.meta[:len(s.t.meta)-len("meta")], s.ro.why)
}

// writeHint is what to do about err, writing one of the ledger's files: "" when it is not about
// a read-only file system or permissions.
func writeHint(err error) string {
	switch {
	case errors.Is(err, unix.EROFS):
		return "; the file system is read-only: commands that only read the ledger (status, history, doctor) work, this one cannot; fix: remount it read-write"
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Sprintf("; uid %d may not write the ledger: commands that only read it (status, history, doctor) work, this one cannot; fix: run it as the ledger's owner", os.Geteuid())
	}
	return ""
}
