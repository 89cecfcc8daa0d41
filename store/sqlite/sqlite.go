// Package sqlite is the embedded store: leases and the run ledger in one SQLite file, shared
// safely by many processes on one machine.
//
// It registers the DSN scheme "sqlite" (sqlite:///var/lib/once/once.db, sqlite:./once.db). The
// file runs in WAL mode with synchronous=FULL, so every state change is on disk when the call
// returns; every write is one BEGIN IMMEDIATE transaction that checks the fencing token in the
// same transaction. Times are this machine's clock. It is not for network filesystems, whose
// locks SQLite cannot trust.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/once-run/once/internal/trust"
	"github.com/once-run/once/store"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// SchemaVersion is the version of the tables this package creates and understands. Version 2
// added the keys table (store.Keys); version 3 the indexes history, status and prune read, and the
// waiting table; version 4 missed events (store.Missed) and the index of events by kind; version 5 the
// lease_seats table (AcquireRequest.Limit, seats.go); version 6 the attempts' seats column
// (store.Attempt.Limit). An older
// file is upgraded in place when opened; a newer one is refused (ErrUnavailable: upgrade once).
const SchemaVersion = 6

func init() {
	store.Register("sqlite", func(ctx context.Context, dsn string) (store.Store, error) {
		path, opts, err := ParseDSN(dsn)
		if err != nil {
			return nil, err
		}
		return Open(ctx, path, opts)
	})
	store.RegisterReader("sqlite", func(ctx context.Context, dsn string) (store.Store, error) {
		path, opts, err := ParseDSN(dsn)
		if err != nil {
			return nil, err
		}
		return OpenReader(ctx, path, opts)
	})
}

// Store is a SQLite-backed store.Store. It is safe for concurrent use by many goroutines and,
// through SQLite's file locks, by many processes on the same machine.
type Store struct {
	db   *sql.DB
	path string
	busy time.Duration
	t    tables
	clk  machineClock
	cs   clockState
	pol  trust.Policy
	id   string       // the ledger's id (files.go)
	mk   *markerFile  // the marker, updated after each commit; nil until open
	q    *writerQueue // the writers' queue (queue.go)
	w    watch        // the files opened; checked after each write
	ro   *readOnly    // why the store was opened read-only (readonly.go); nil: read-write
	// count is the prepared statement that counts a write (compiling it anew would cost more
	// than running it); counted is the connection's total_changes() after the last counted
	// write (txRaw runs on the one connection, serialized).
	count   *sql.Stmt
	counted int64
}

var (
	_ store.Store = (*Store)(nil)
	_ store.Clock = (*Store)(nil)
)

type tables struct{ meta, leases, attempts, events, keys, waiting, seats string }

// Open opens (creating when missing) the SQLite store at path. A missing parent directory is
// created with mode 0700 and a missing file with mode 0600 (0660 with Options.Group), whatever
// the umask; a path that is a symbolic link is refused. The directory and the files SQLite uses
// must be changeable by this user and root only, or by the members of Options.Group (files.go);
// a ledger whose file was deleted, emptied or replaced is refused (ErrGone), except on first
// creation. The schema is created on first use in one transaction, safely when many processes
// do it at once; later opens only read its version. Errors wrap store.ErrBadDSN for bad options
// and store.ErrUnavailable when the file cannot be used or trusted.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	s, err := newStore(path, opts)
	if err != nil {
		return nil, err
	}
	return s.open(ctx)
}

// newStore checks path and opts and makes the Store that open or openReadOnly opens.
func newStore(path string, opts Options) (*Store, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if path == "" || strings.ContainsAny(path, "?\x00") {
		return nil, fmt.Errorf("%w: sqlite path %q is empty or contains '?' or NUL", store.ErrBadDSN, path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%w: sqlite %s: %v", store.ErrUnavailable, path, err)
	}
	if opts.BusyTimeout == 0 {
		opts.BusyTimeout = DefaultBusyTimeout
	}
	pol, err := opts.policy()
	if err != nil {
		return nil, err
	}
	p := opts.Prefix
	return &Store{clk: sysClock, path: abs, busy: opts.BusyTimeout, pol: pol, t: tables{p + "meta", p + "leases", p + "attempts", p + "events", p + "keys", p + "waiting", p + "lease_seats"}}, nil
}

// open opens s to read and write (Open).
func (s *Store) open(ctx context.Context) (*Store, error) {
	m, err := s.openFiles()
	if err != nil {
		return nil, err
	}
	// busy_timeout is applied first by the driver. The switch to WAL is not a pragma here: see useWAL.
	drv := fmt.Sprintf("%s?_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)&_pragma=journal_size_limit(%d)&_txlock=immediate",
		s.path, s.busy.Milliseconds(), walLimit)
	s.db, err = sql.Open("sqlite", drv)
	if err != nil {
		s.q.close()
		return nil, s.mapErr(err)
	}
	// One connection per client: writes are serialized in-process instead of spinning in
	// SQLite's busy handler, and nothing here runs nested statements.
	s.db.SetMaxOpenConns(1)
	s.db.SetConnMaxIdleTime(0)
	fail := func(err error) (*Store, error) {
		s.db.Close()
		s.mk.close()
		s.q.close()
		return nil, err
	}
	if err := s.useWAL(ctx); err != nil {
		return fail(err)
	}
	seq, err := s.ensureSchema(ctx, m != nil)
	if err != nil {
		return fail(err)
	}
	if err := s.checkLedger(m, s.id, seq); err != nil {
		return fail(err)
	}
	// The count also reads the schema version, in the same statement: a newer once that upgraded
	// the file since this process opened it stops this process's writes (aheadErr).
	if s.count, err = s.db.PrepareContext(ctx, "UPDATE "+ledgerTable+" SET seq = seq + 1 WHERE total_changes() > ? RETURNING seq, total_changes(), ("+s.t.versionSQL()+")"); err != nil {
		return fail(s.mapErr(err))
	}
	if err := s.persistWAL(ctx); err != nil {
		return fail(err)
	}
	if err := s.remember(); err != nil {
		return fail(err)
	}
	return s, nil
}

// useWAL switches the file to WAL mode; reading the mode is all it costs once the file is WAL.
// The switch is a write that SQLite's busy handler does not wait for: it reads the header, then
// upgrades its read to a write, and an upgrade that finds another writer fails at once with
// SQLITE_BUSY (a fleet of daemons started together on a new file failed so, one in a few
// hundred). So it waits here: in the writers' queue, which once processes opening the same new
// file take in turn, and retrying while another client (a sqlite3 shell) writes, up to
// busy_timeout. A file that stays in another mode (a file system without shared memory) is
// reported by Health.
func (s *Store) useWAL(ctx context.Context) error {
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return s.mapErr(err)
	}
	if mode == "wal" {
		return nil
	}
	return s.queued(ctx, func() error {
		deadline := time.Now().Add(s.busy)
		for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
			err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode)
			if !isBusy(err) || time.Now().After(deadline) {
				return s.mapErr(err)
			}
			select {
			case <-ctx.Done():
				return s.mapErr(ctx.Err())
			case <-time.After(wait):
			}
		}
	})
}

// isBusy says whether err is SQLite's SQLITE_BUSY or SQLITE_LOCKED (any extended code).
func isBusy(err error) bool {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code() & 0xff
	return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
}

// openFiles checks who may change the ledger's files, reads its marker (the ledger that was
// there), creates the file when it is new and opens the writers' queue. The marker is nil for a
// new ledger.
func (s *Store) openFiles() (*marker, error) {
	dirExists, err := s.checkTrust()
	if err != nil {
		if ro := cannotWrite(s.path); ro != nil && !ro.rofs && errors.Is(err, trust.ErrUnsafe) && s.othersLedger() {
			// Another user's ledger, which this one may read but not write: chown-ing it, as
			// the trust check says, would take it from its owner.
			return nil, fmt.Errorf("%w: sqlite %s: %s, another user's ledger: commands that only read it (status, history, doctor) work, this one cannot; fix: run it as the ledger's owner", store.ErrUnavailable, s.path, ro.why)
		}
		return nil, err
	}
	var m *marker
	if dirExists {
		// The marker is read before the database, so the database has seen at least every write
		// the marker counts.
		if m, err = readMarker(MarkerPath(s.path)); err != nil {
			return nil, fmt.Errorf("%w: sqlite %s: %s; fix: rm %s (it is written again from the ledger)",
				store.ErrUnavailable, s.path, oneLine(err.Error()), trust.Quote(MarkerPath(s.path)))
		}
		if err := s.checkPresent(m); err != nil {
			return nil, err
		}
	} else if s.pol.Shared {
		dir := trust.Quote(filepath.Dir(s.path))
		return nil, fmt.Errorf("%w: sqlite %s: the shared directory does not exist; fix: install -d -o root -g %d -m 2770 %s", store.ErrUnavailable, s.path, s.pol.Group, dir)
	}
	if err := prepareFile(s.path, s.fileMode()); err != nil {
		return nil, err
	}
	if !dirExists { // created just now: check what was made
		if _, err := s.checkTrust(); err != nil {
			return nil, err
		}
	}
	if s.q, err = openQueue(s.path, s.fileMode(), s.pol); err != nil {
		return nil, s.unsafeOrUnavailable(err)
	}
	return m, nil
}

// persistWAL keeps the -wal and -shm files when the last connection closes. `once run` opens
// and closes the store on every run; deleting and recreating the WAL each time costs an extra
// fsync and two unlinks per run.
func (s *Store) persistWAL(ctx context.Context) error {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return s.mapErr(err)
	}
	defer c.Close()
	return s.mapErr(c.Raw(func(dc any) error {
		if fc, ok := dc.(msqlite.FileControl); ok {
			_, err := fc.FileControlPersistWAL("main", 1)
			return err
		}
		return nil
	}))
}

// prepareFile creates the parent directories (0700) and the database file (mode) when missing,
// without following a symbolic link at the file's name.
func prepareFile(path string, mode uint32) error {
	unavailable := func(format string, args ...any) error {
		return fmt.Errorf("%w: sqlite %s: %s", store.ErrUnavailable, path, fmt.Sprintf(format, args...))
	}
	cannot := func(what string, err error) error {
		return unavailable("cannot %s: %v%s", what, unwrapPathErr(err), writeHint(err))
	}
	fi, err := os.Lstat(path)
	switch {
	case err == nil:
		if fi.Mode()&fs.ModeSymlink != 0 {
			return unavailable("is a symbolic link; point the DSN at the real file")
		}
		if !fi.Mode().IsRegular() {
			return unavailable("is not a regular file")
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return unavailable("%v", unwrapPathErr(err))
	}
	if err := mkdirs(filepath.Dir(path)); err != nil {
		return cannot("create its directory", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fs.FileMode(mode))
	if errors.Is(err, fs.ErrExist) {
		return prepareFile(path, mode) // another process created it first
	}
	if err != nil {
		return cannot("create the file", err)
	}
	defer f.Close()
	if err := f.Chmod(fs.FileMode(mode)); err != nil {
		return unavailable("cannot set mode %#o: %v", mode, unwrapPathErr(err))
	}
	return nil
}

// mkdirs creates dir and missing parents with mode 0700 (chmod after mkdir, so the umask
// cannot widen or narrow it). Existing components are left as they are.
func mkdirs(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirs(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	// fchmod through an O_NOFOLLOW handle: if the new directory was swapped for a symbolic
	// link, this fails instead of changing the link's target.
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Chmod(0o700)
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Close closes the connection. Leases are kept.
func (s *Store) Close() error {
	if s.count != nil {
		s.count.Close()
	}
	err := s.db.Close()
	s.mk.close()
	s.q.close()
	return err
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Now returns the store's time as its leases show it: the clock that decides expiry (this boot's
// epoch plus the machine's boot clock, see clock.go) while it is within a second of this
// machine's wall clock, else the wall clock — the rule by which lease times are shown (shown), so
// that a lease's Acquired and Expires and Now are read off the same clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, s.mapErr(err)
	}
	us, err := s.now(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return micros(us).Add(s.wallOffset()).UTC(), nil
}

// tx runs fn in one BEGIN IMMEDIATE transaction and commits it; now is the store's clock in
// unix microseconds, read after the lock is held.
func (s *Store) tx(ctx context.Context, fn func(tx *sql.Tx, now int64) error) error {
	return s.txLazy(ctx, false, fn)
}

// txLazy is tx, committed without waiting for the disk when lazy (see write).
func (s *Store) txLazy(ctx context.Context, lazy bool, fn func(tx *sql.Tx, now int64) error) error {
	return s.write(ctx, lazy, func(tx *sql.Tx) error {
		now, err := s.nowTx(ctx, tx)
		if err != nil {
			return err
		}
		return fn(tx, now)
	})
}

// txRaw runs fn in one BEGIN IMMEDIATE transaction (the write lock is taken up front, so a read
// never has to be upgraded under contention) and commits it durably, holding the writers' queue
// (queue.go) from before BEGIN until after the commit.
//
// Once the store is open, each transaction that changed rows also counts itself in the ledger's
// write counter, and every transaction checks after its commit that the files are still the ones
// opened (files.go): a commit into a deleted file is reported as an error, never as recorded.
func (s *Store) txRaw(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.write(ctx, false, fn)
}

// write is txRaw; lazy commits without waiting for the disk (synchronous=NORMAL for this one
// transaction): a crash or power loss may undo it, never part of it, and the next durable commit
// syncs it with its own. A lazy commit is not counted in the write counter, so the marker never
// counts a write the disk may not have.
func (s *Store) write(ctx context.Context, lazy bool, fn func(tx *sql.Tx) error) error {
	if err := s.w.lost.Load(); err != nil {
		return *err
	}
	if s.ro != nil {
		return s.ro.refuse(s.path)
	}
	var seq int64
	err := s.queued(ctx, func() error {
		s.restartWAL(ctx)
		var (
			tx  *sql.Tx
			c   *sql.Conn
			err error
		)
		if lazy {
			// The one connection, held for the pragma, the transaction and the pragma back, so
			// no other goroutine's commit runs without its fsync.
			if c, err = s.db.Conn(ctx); err != nil {
				return s.mapErr(err)
			}
			defer func() {
				if _, err := c.ExecContext(context.WithoutCancel(ctx), "PRAGMA synchronous=FULL"); err != nil {
					_ = c.Raw(func(any) error { return driver.ErrBadConn }) // never reused, then
				}
				c.Close()
			}()
			if _, err := c.ExecContext(ctx, "PRAGMA synchronous=NORMAL"); err != nil {
				return s.mapErr(err)
			}
			tx, err = c.BeginTx(ctx, nil)
		} else {
			tx, err = s.db.BeginTx(ctx, nil)
		}
		if err != nil {
			return s.mapErr(err)
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return s.mapErr(err)
		}
		if seq, err = s.countWrite(ctx, tx, lazy); err != nil {
			_ = tx.Rollback()
			return s.mapErr(err)
		}
		return s.mapErr(tx.Commit())
	})
	if err != nil {
		return err
	}
	// After the commit: a commit into a deleted or replaced file is an error, never recorded.
	if err := s.still(); err != nil {
		return err
	}
	s.mk.note(s.id, seq)
	return nil
}

// countWrite counts a durable transaction that changed rows in the ledger's write counter, and
// checks, in the same statement, that the schema is still the version this process opened: a
// newer once that upgraded the file meanwhile makes it roll back (aheadErr). Counted only when fn
// changed rows (the connection's total_changes() moved since the last count): a transaction that
// only read commits nothing and costs no fsync, and must stay so. RETURNING sees total_changes()
// before this UPDATE's own row. A lazy transaction (an event) is not counted; it reads the
// version alone (no fsync either way). seq is 0 when nothing was counted.
func (s *Store) countWrite(ctx context.Context, tx *sql.Tx, lazy bool) (int64, error) {
	if s.count == nil {
		return 0, nil
	}
	if lazy {
		v, err := s.t.schemaVersion(ctx, tx)
		if err != nil {
			return 0, err
		}
		if v != SchemaVersion {
			return 0, s.aheadErr(v)
		}
		return 0, nil
	}
	var seq, tc, v int64
	err := tx.StmtContext(ctx, s.count).QueryRowContext(ctx, s.counted).Scan(&seq, &tc, &v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, err
	case v != SchemaVersion:
		return 0, s.aheadErr(v)
	}
	s.counted = tc + 1
	return seq, nil
}

// aheadErr is the error of a write that found schema version v, not the one this process opened
// (a newer once upgraded the file since): every later write and read of this Store returns it too
// (the process must be restarted with the newer once).
func (s *Store) aheadErr(v int64) error {
	err := store.SchemaAhead("sqlite "+s.path, v, SchemaVersion)
	s.w.lost.CompareAndSwap(nil, &err)
	return *s.w.lost.Load()
}

// read runs fn in a read-only (deferred) transaction: a consistent snapshot that takes no write
// lock and waits for no writer (WAL). Like every read, it first checks that the files are still
// the ledger (still): a process that only reads (once serve) would otherwise go on showing a
// deleted or replaced ledger, all well, while every once run refuses it (69).
func (s *Store) read(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := s.still(); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return s.mapErr(err)
	}
	defer tx.Rollback()
	return s.mapErr(fn(tx))
}

// mapErr is the one place where driver errors become store sentinels. Errors that already
// carry a sentinel pass through unchanged. Messages are one line and name the file.
func (s *Store) mapErr(err error) error {
	if err == nil {
		return nil
	}
	for _, sentinel := range []error{ErrGone, store.ErrBusy, store.ErrNotHeld, store.ErrConflict, store.ErrNotFound, store.ErrUnavailable, store.ErrBadDSN, store.ErrFingerprint} {
		if errors.Is(err, sentinel) {
			return err
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: sqlite %s: %w", store.ErrUnavailable, s.path, err)
	}
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return fmt.Errorf("%w: sqlite %s: %s", store.ErrUnavailable, s.path, oneLine(err.Error()))
	}
	msg := oneLine(se.Error())
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_CONSTRAINT:
		return fmt.Errorf("%w: %s", store.ErrConflict, msg)
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return fmt.Errorf("%w: sqlite %s: locked by another process (%s; busy_timeout %s); retry, or raise ?busy_timeout=", store.ErrUnavailable, s.path, msg, s.busy)
	case sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT:
		return fmt.Errorf("%w: sqlite %s: not a SQLite database or corrupt; move it aside (a new ledger is created) or restore a backup", store.ErrUnavailable, s.path)
	case sqlite3.SQLITE_READONLY:
		return fmt.Errorf("%w: sqlite %s: read-only; make the file, its -wal/-shm files and its directory writable by this user", store.ErrUnavailable, s.path)
	case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH:
		return fmt.Errorf("%w: sqlite %s: cannot open (%s); check that the file and its directory are readable and writable by this user", store.ErrUnavailable, s.path, msg)
	case sqlite3.SQLITE_FULL:
		return fmt.Errorf("%w: sqlite %s: disk full", store.ErrUnavailable, s.path)
	default:
		return fmt.Errorf("%w: sqlite %s: %s", store.ErrUnavailable, s.path, msg)
	}
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// CheckSchema reads the file's schema version and fails with store.ErrSchemaAhead when a newer
// once upgraded it since this process opened it; every later call then fails so
// (store.SchemaChecker). Writes check it themselves (countWrite), without a statement of their own.
func (s *Store) CheckSchema(ctx context.Context) error {
	var v int64
	err := s.read(ctx, func(tx *sql.Tx) (err error) {
		v, err = s.t.schemaVersion(ctx, tx)
		return err
	})
	if err != nil || v <= SchemaVersion {
		return err
	}
	return s.aheadErr(v)
}
