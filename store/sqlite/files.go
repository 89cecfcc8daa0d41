package sqlite

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/once-run/once/internal/trust"
	"github.com/once-run/once/store"
)

// The ledger's files.
//
// Who may write them: the database decides what runs, so its directory and every file SQLite
// opens next to it (-wal, -shm, -journal) and the marker must be changeable by this user (and
// root) only — or, with ?group=, by the members of that group — under directories nobody else
// can rename things in (package internal/trust). A world-writable directory is refused even
// when sticky: another user could create the -journal or -wal file SQLite would then read.
//
// Whether they are still the ledger: a ledger file deleted, emptied or replaced would otherwise
// become a new, empty ledger on the next open (tokens restart at 1, successes forgotten, so a
// slot runs twice). Next to once.db lives a marker, .once.db.ledger (no glob once.db* matches
// it), written when the ledger is created. It holds the ledger's id, also stored in the
// database (table once_ledger), and a high-water mark of the ledger's write counter, which
// every write transaction increments; the marker is updated after each commit without an
// fsync (it guards against files removed by hand, not against power loss, which SQLite's own
// fsyncs cover). Opening fails closed (ErrGone) when the marker exists and the database is
// missing, empty, holds another ledger or has fewer writes than the marker has seen (its -wal
// deleted, an older copy restored). While open, every transaction checks after its commit that
// the database, -wal and -shm paths still name the files that were opened and that the database
// is not empty: a commit into a deleted file is reported as an error, never as recorded.

// ErrGone matches errors about a ledger file that was deleted, emptied or replaced, or that
// went back in time. They also match store.ErrUnavailable, and store.ErrNotRecorded: a write
// that failed so is not in the ledger anyone reads (its commit went into the lost file).
var ErrGone = errors.New("sqlite: ledger gone")

type goneError struct{ err error }

func (e *goneError) Error() string { return e.err.Error() }
func (e *goneError) Unwrap() error { return e.err }
func (e *goneError) Is(target error) bool {
	return target == ErrGone || target == store.ErrNotRecorded
}

func (s *Store) gone(format string, a ...any) error {
	return &goneError{fmt.Errorf("%w: sqlite %s: %s", store.ErrUnavailable, s.path, fmt.Sprintf(format, a...))}
}

func (s *Store) unsafe(err error) error {
	return fmt.Errorf("%w: sqlite %s: %w", store.ErrUnavailable, s.path, err)
}

// MarkerPath is the marker of the ledger in database file path.
func MarkerPath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".ledger")
}

// sideFiles are the files SQLite opens next to the database.
var sideFiles = []string{"-wal", "-shm", "-journal"}

// policy resolves Options.Group.
func (o Options) policy() (trust.Policy, error) {
	if o.Group == "" {
		return trust.Policy{}, nil
	}
	gid, err := strconv.Atoi(o.Group)
	if err != nil {
		g, lerr := user.LookupGroup(o.Group)
		if lerr != nil {
			return trust.Policy{}, fmt.Errorf("%w: sqlite group %q: no such group", store.ErrBadDSN, o.Group)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	if gid < 0 {
		return trust.Policy{}, fmt.Errorf("%w: sqlite group %q: no such group", store.ErrBadDSN, o.Group)
	}
	if !trust.Member(gid) {
		return trust.Policy{}, fmt.Errorf("%w: sqlite group %q: this user is not a member; fix: usermod -aG %s USER, then log in again", store.ErrUnavailable, o.Group, trust.Quote(o.Group))
	}
	return trust.Policy{Group: gid, Shared: true}, nil
}

// checkTrust checks the database's directory and the files SQLite would open, before it opens
// them. It returns whether the directory exists.
func (s *Store) checkTrust() (bool, error) {
	return s.checkTrustWith(s.pol)
}

// checkTrustWith is checkTrust under policy pol.
func (s *Store) checkTrustWith(pol trust.Policy) (bool, error) {
	_, exists, err := trust.Dir(filepath.Dir(s.path), pol)
	if err != nil {
		if errors.Is(err, trust.ErrUnsafe) {
			return false, s.unsafe(err)
		}
		return false, fmt.Errorf("%w: sqlite %s: %v", store.ErrUnavailable, s.path, err)
	}
	if !exists {
		return false, nil
	}
	for _, p := range append([]string{s.path, MarkerPath(s.path), QueuePath(s.path)}, withSuffixes(s.path)...) {
		if _, err := trust.File(p, pol); err != nil {
			if errors.Is(err, trust.ErrUnsafe) {
				return true, s.unsafe(err)
			}
			return true, fmt.Errorf("%w: sqlite %s: %v", store.ErrUnavailable, s.path, err)
		}
	}
	return true, nil
}

func withSuffixes(path string) []string {
	out := make([]string, len(sideFiles))
	for i, x := range sideFiles {
		out[i] = path + x
	}
	return out
}

func (s *Store) fileMode() uint32 {
	if s.pol.Shared {
		return 0o660
	}
	return 0o600
}

// checkPresent fails closed when the marker says a ledger exists and the database file is
// missing or empty (a first creation has no marker).
func (s *Store) checkPresent(m *marker) error {
	if m == nil {
		return nil
	}
	var st unix.Stat_t
	err := unix.Stat(s.path, &st)
	switch {
	case errors.Is(err, unix.ENOENT):
		return s.gone("the file is missing, but %s records ledger %s here (deleted?); %s", MarkerPath(s.path), m.id, s.restoreOrNew())
	case err != nil:
		return fmt.Errorf("%w: sqlite %s: %v", store.ErrUnavailable, s.path, err)
	case st.Size == 0:
		return s.gone("the file is empty (0 bytes), but %s records ledger %s here (truncated?); %s", MarkerPath(s.path), m.id, s.restoreOrNew())
	}
	return nil
}

// restoreOrNew is the fix for a lost ledger: a backup, or a new ledger on purpose.
func (s *Store) restoreOrNew() string {
	return fmt.Sprintf("fix: restore it from a backup, or start a new, empty ledger on purpose: rm %s", trust.Quote(MarkerPath(s.path)))
}

// checkLedger compares the ledger in the database (id, seq) with the marker, and writes the
// marker when there is none (a first creation, or a ledger made before markers existed).
func (s *Store) checkLedger(m *marker, id string, seq int64) error {
	mp := MarkerPath(s.path)
	compareSeq := m != nil
	if m == nil {
		// A marker another process created meanwhile was read after the database: it may count
		// writes this open did not see yet, so only its id can be compared.
		var err error
		if m, err = createMarker(mp, marker{id: id, seq: seq}, s.fileMode()); err != nil {
			return s.unsafeOrUnavailable(err)
		}
	}
	if err := s.compareMarker(m, id, seq, compareSeq); err != nil {
		return err
	}
	f, err := os.OpenFile(mp, os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return s.unsafeOrUnavailable(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return s.unsafeOrUnavailable(err)
	}
	if err := trust.Stat(mp, &st, s.pol); err != nil {
		f.Close()
		return s.unsafe(err)
	}
	s.mk = &markerFile{f: f, seq: seq}
	return nil
}

// compareMarker fails with ErrGone when the database holds another ledger than marker m records,
// or (compareSeq) fewer writes than it saw.
func (s *Store) compareMarker(m *marker, id string, seq int64, compareSeq bool) error {
	mp := MarkerPath(s.path)
	switch {
	case m.id != id:
		return s.gone("the file holds ledger %s, but %s records ledger %s here (replaced by another file?); fix: put the right file back, or accept this one: rm %s",
			id, mp, m.id, trust.Quote(mp))
	case compareSeq && seq < m.seq:
		return s.gone("the ledger went back in time: it counts %d writes, but %s saw %d (its -wal file deleted, or an older copy restored?); fix: restore the newest copy, or accept this one as it is: rm %s",
			seq, mp, m.seq, trust.Quote(mp))
	}
	return nil
}

// unsafeOrUnavailable is err, opening or creating one of the ledger's files, as the store's error:
// one that says what to do when the file system is read-only or the user may not write there.
func (s *Store) unsafeOrUnavailable(err error) error {
	if errors.Is(err, trust.ErrUnsafe) {
		return s.unsafe(err)
	}
	return fmt.Errorf("%w: sqlite %s: %s%s", store.ErrUnavailable, s.path, oneLine(err.Error()), writeHint(err))
}

// markerFile is the open marker, updated after each commit.
type markerFile struct {
	mu  sync.Mutex
	f   *os.File
	seq int64 // the highest seq written
}

// note records seq as seen, when it is higher than what the marker holds. No fsync: see above.
func (m *markerFile) note(id string, seq int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if seq <= m.seq || m.f == nil {
		return
	}
	if _, err := m.f.WriteAt([]byte(marker{id: id, seq: seq}.String()), 0); err == nil {
		m.seq = seq
	}
}

func (m *markerFile) close() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f != nil {
		m.f.Close()
		m.f = nil
	}
}

// fileID names a file for as long as it exists.
type fileID struct{ dev, ino uint64 }

// watch is what the database, -wal and -shm paths named when the store opened them.
type watch struct {
	ids  [3]fileID // zero: the file did not exist (then it is not watched)
	lost atomic.Pointer[error]
	wal  atomic.Int64 // the -wal file's size when last seen (wal.go)
}

var watched = [3]string{"", "-wal", "-shm"}

// remember records the files the open connection uses (it has read them by now).
func (s *Store) remember() error {
	for i, x := range watched {
		var st unix.Stat_t
		err := unix.Stat(s.path+x, &st)
		if errors.Is(err, unix.ENOENT) && i > 0 {
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: sqlite %s: %v", store.ErrUnavailable, s.path, err)
		}
		s.w.ids[i] = fileID{uint64(st.Dev), st.Ino}
		if i == 1 {
			s.w.wal.Store(st.Size)
		}
	}
	return nil
}

// still fails with ErrGone when a watched path no longer names the file that was opened, or
// the database became empty: writes would go to a file nobody else will ever read. Once it has
// failed it keeps failing: the commit that revealed it went into the lost file, and a retry must
// not read that commit back as the ledger's state.
func (s *Store) still() error {
	if err := s.w.lost.Load(); err != nil {
		return *err
	}
	err := s.check()
	if err != nil && errors.Is(err, ErrGone) {
		s.w.lost.CompareAndSwap(nil, &err)
	}
	return err
}

func (s *Store) check() error {
	for i, x := range watched {
		id := s.w.ids[i]
		if id == (fileID{}) {
			continue
		}
		var st unix.Stat_t
		err := unix.Stat(s.path+x, &st)
		switch {
		case errors.Is(err, unix.ENOENT):
			return s.gone("%s was deleted while in use: what this process writes now is lost, so it records nothing more; %s", filepath.Base(s.path+x), s.restoreOrNew())
		case err != nil:
			return fmt.Errorf("%w: sqlite %s: %v", store.ErrUnavailable, s.path, err)
		case (fileID{uint64(st.Dev), st.Ino}) != id:
			return s.gone("%s was replaced while in use: this process records nothing more; %s", filepath.Base(s.path+x), s.restoreOrNew())
		case i == 0 && st.Size == 0:
			return s.gone("the file was emptied (0 bytes) while in use: this process records nothing more; %s", s.restoreOrNew())
		case i == 1:
			s.w.wal.Store(st.Size)
		}
	}
	return nil
}
