package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/once-run/once/internal/trust"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
)

// private returns a fresh private directory and the path of a database in it.
func private(t *testing.T) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(dir, "once.db")
}

func open(t *testing.T, path string) (*sqlite.Store, error) {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func mustOpen(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := open(t, path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// write makes one counted write (a lease taken and released).
func write(t *testing.T, s *sqlite.Store, task string) {
	t.Helper()
	ctx := context.Background()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "h", RunID: "r", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
}

func marker(t *testing.T, path string) (string, int64) {
	t.Helper()
	b, err := os.ReadFile(sqlite.MarkerPath(path))
	if err != nil {
		t.Fatal(err)
	}
	id, seq, err := sqlite.ParseMarker(b)
	if err != nil {
		t.Fatalf("marker %q: %v", b, err)
	}
	return id, seq
}

func wantGone(t *testing.T, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, sqlite.ErrGone) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("want ErrGone and ErrUnavailable, got %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error lacks %q: %v", w, err)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error is not one line: %q", err)
	}
}

func removeAll(t *testing.T, path string) {
	t.Helper()
	for _, x := range []string{"", "-wal", "-shm", "-journal"} {
		if err := os.Remove(path + x); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

func TestMarkerWrittenOnCreationAndCounted(t *testing.T) {
	_, path := private(t)
	s := mustOpen(t, path)
	id, seq := marker(t, path)
	if seq != 0 {
		t.Fatalf("new ledger: seq %d", seq)
	}
	fi, err := os.Stat(sqlite.MarkerPath(path))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("marker mode %v %v", fi.Mode(), err)
	}
	write(t, s, "a")
	if id2, seq2 := marker(t, path); id2 != id || seq2 != 2 {
		t.Fatalf("after a lease taken and released: %s %d, want %s 2", id2, seq2, id)
	}
	// Reads count nothing.
	if _, err := s.Slot(context.Background(), "a", "x"); err != nil {
		t.Fatal(err)
	}
	if _, seq := marker(t, path); seq != 2 {
		t.Fatalf("a read was counted: %d", seq)
	}
	s.Close()
	mustOpen(t, path)
}

func TestLedgerWithoutMarkerIsAdopted(t *testing.T) {
	_, path := private(t)
	s := mustOpen(t, path)
	write(t, s, "a")
	id, _ := marker(t, path)
	s.Close()
	// The marker deleted: written again, same ledger.
	if err := os.Remove(sqlite.MarkerPath(path)); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, path).Close()
	if id2, seq := marker(t, path); id2 != id || seq != 2 {
		t.Fatalf("rewritten marker: %s %d, want %s 2", id2, seq, id)
	}
	// A ledger made before markers existed: no id table, no marker. It gets both and keeps its rows.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DROP TABLE once_ledger"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := os.Remove(sqlite.MarkerPath(path)); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path)
	if ls, err := s.Leases(context.Background()); err != nil || len(ls) != 0 {
		t.Fatalf("leases: %v %v", ls, err)
	}
	if id3, _ := marker(t, path); id3 == id {
		t.Fatal("an old ledger got the id of the dropped table")
	}
}

func TestDeletedOrEmptiedRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(t *testing.T, path string)
		want string
	}{
		{"deleted", func(t *testing.T, path string) { removeAll(t, path) }, "the file is missing"},
		{"db only deleted", func(t *testing.T, path string) { os.Remove(path) }, "the file is missing"},
		{"truncated", func(t *testing.T, path string) { os.Truncate(path, 0) }, "the file is empty (0 bytes)"},
		{"emptied", func(t *testing.T, path string) {
			removeAll(t, path)
			db, _ := sql.Open("sqlite", path) // a valid, empty SQLite database
			if _, err := db.Exec("CREATE TABLE x (y)"); err != nil {
				t.Fatal(err)
			}
			db.Close()
		}, "the file holds no once ledger"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, path := private(t)
			s := mustOpen(t, path)
			write(t, s, "a")
			// Leave the store open like `once run` does (no checkpoint at exit). (A lost -wal file
			// needs the writer in another process: cmd/once's e2e tests.)
			c.do(t, path)
			_, err := open(t, path)
			wantGone(t, err, c.want, "rm "+sqlite.MarkerPath(path))
			t.Log(err)
			s.Close()
		})
	}
	// Starting a new ledger on purpose: move the marker aside too.
	_, path := private(t)
	mustOpen(t, path).Close()
	id, _ := marker(t, path)
	removeAll(t, path)
	if err := os.Remove(sqlite.MarkerPath(path)); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, path)
	if id2, _ := marker(t, path); id2 == id {
		t.Fatal("new ledger has the old id")
	}
}

func TestReplacedOrOlderRefused(t *testing.T) {
	dir, path := private(t)
	s := mustOpen(t, path)
	write(t, s, "a")
	s.Close() // checkpointed: the file alone is the ledger
	old := filepath.Join(dir, "copy.db")
	copyFile(t, path, old)
	s = mustOpen(t, path)
	write(t, s, "b")
	s.Close()

	// An older copy of the same ledger put back.
	copyFile(t, old, path)
	_, err := open(t, path)
	wantGone(t, err, "went back in time: it counts 2 writes", "saw 4")

	// Another ledger put in its place.
	other := filepath.Join(dir, "other.db")
	mustOpen(t, other).Close()
	copyFile(t, other, path)
	_, err = open(t, path)
	wantGone(t, err, "holds ledger", "replaced")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []string{"-wal", "-shm"} {
		os.Remove(to + x)
	}
	if err := os.WriteFile(to+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(to+".tmp", to); err != nil {
		t.Fatal(err)
	}
}

// A store whose files are deleted, emptied or replaced while it is open records nothing more, and a
// renewal says the lease is not held, so the holder stops at once.
func TestGoneWhileOpen(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(t *testing.T, path string)
		want string
	}{
		{"deleted", func(t *testing.T, path string) { removeAll(t, path) }, "once.db was deleted while in use"},
		{"wal deleted", func(t *testing.T, path string) { os.Remove(path + "-wal") }, "once.db-wal was deleted while in use"},
		{"truncated", func(t *testing.T, path string) { os.Truncate(path, 0) }, "emptied (0 bytes) while in use"},
		{"replaced", func(t *testing.T, path string) { copyFile(t, path, path) }, "once.db was replaced while in use"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			_, path := private(t)
			s := mustOpen(t, path)
			l, err := s.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "h", RunID: "r", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			c.do(t, path)
			_, err = s.Renew(ctx, l, time.Minute)
			wantGone(t, err, c.want)
			if !errors.Is(err, store.ErrNotHeld) {
				t.Fatalf("renew: want ErrNotHeld too, got %v", err)
			}
			_, err = s.Begin(ctx, store.Attempt{Task: "t", Slot: "s", RunID: "r", Number: 1, Holder: "h", Token: l.Token, State: store.Running})
			wantGone(t, err, c.want)
			if errors.Is(err, store.ErrNotHeld) {
				t.Fatalf("begin: must not read as a lost lease (busy): %v", err)
			}
		})
	}
}

func TestUnsafeFilesRefused(t *testing.T) {
	wantUnsafe := func(t *testing.T, err error, fix string) {
		t.Helper()
		if !errors.Is(err, trust.ErrUnsafe) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), fix) {
			t.Fatalf("want ErrUnsafe and ErrUnavailable with %q, got %v", fix, err)
		}
	}
	t.Run("0777 directory", func(t *testing.T) {
		dir, path := private(t)
		mustOpen(t, path).Close()
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		_, err := open(t, path)
		wantUnsafe(t, err, "chmod 700 "+dir)
	})
	t.Run("0666 database", func(t *testing.T) {
		_, path := private(t)
		mustOpen(t, path).Close()
		if err := os.Chmod(path, 0o666); err != nil {
			t.Fatal(err)
		}
		_, err := open(t, path)
		wantUnsafe(t, err, "chmod 600 "+path)
	})
	t.Run("sticky world-writable directory", func(t *testing.T) {
		dir, _ := private(t)
		tmp := filepath.Join(dir, "tmp")
		if err := os.Mkdir(tmp, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(tmp, 0o1777); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(tmp, "x.db")
		_, err := open(t, path)
		wantUnsafe(t, err, "mkdir -m 700 "+filepath.Join(tmp, "once"))
		if _, err := os.Stat(path); err == nil {
			t.Fatal("the database was created in a world-writable directory")
		}
	})
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
	t.Run("wal of another user", func(t *testing.T) {
		_, path := private(t)
		mustOpen(t, path).Close()
		if err := os.Chown(path+"-wal", 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err := open(t, path)
		wantUnsafe(t, err, "chown 0 "+path+"-wal")
	})
	t.Run("directory of another user", func(t *testing.T) {
		dir, path := private(t)
		mustOpen(t, path).Close()
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err := open(t, path)
		wantUnsafe(t, err, "chown 0 "+dir)
	})
	t.Run("marker of another user", func(t *testing.T) {
		_, path := private(t)
		mustOpen(t, path).Close()
		if err := os.Chown(sqlite.MarkerPath(path), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err := open(t, path)
		wantUnsafe(t, err, "chown 0 "+sqlite.MarkerPath(path))
	})
	t.Run("queue of another user", func(t *testing.T) {
		_, path := private(t)
		mustOpen(t, path).Close()
		if err := os.Chown(sqlite.QueuePath(path), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err := open(t, path)
		wantUnsafe(t, err, "chown 0 "+sqlite.QueuePath(path))
	})
}

func TestGroupShared(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to set up a group directory")
	}
	const g = 4242
	dir, _ := private(t)
	shared := filepath.Join(dir, "shared")
	dsn := "sqlite://" + filepath.Join(shared, "once.db") + "?group=4242"
	if _, err := store.Open(context.Background(), dsn); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "install -d -o root -g 4242 -m 2770") {
		t.Fatalf("missing shared directory: %v", err)
	}
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(shared, 0, g); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(shared, 0o2770); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(context.Background(), store.AcquireRequest{Task: "t", Holder: "h", RunID: "r", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, f := range []string{"once.db", "once.db-wal", "once.db-shm", ".once.db.ledger", ".once.db.queue"} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(shared, f), &st); err != nil {
			t.Fatal(err)
		}
		if st.Gid != g || st.Mode&0o777 != 0o660 {
			t.Errorf("%s: group %d mode %#o, want %d 0660", f, st.Gid, st.Mode&0o777, g)
		}
	}
	// Without the opt-in, the shared files are refused.
	if _, err := store.Open(context.Background(), "sqlite://"+filepath.Join(shared, "once.db")); !errors.Is(err, trust.ErrUnsafe) {
		t.Fatalf("without ?group=: %v", err)
	}
}

func FuzzParseMarker(f *testing.F) {
	f.Add([]byte(sqlite.FormatMarker("0123456789abcdef0123456789abcdef", 0)))
	f.Add([]byte(sqlite.FormatMarker("0123456789abcdef0123456789abcdef", 1<<62)))
	f.Add([]byte("once-ledger 0123456789abcdef0123456789abcdef 99999999999999999999\n"))
	f.Add([]byte("once-ledger 0123456789ABCDEF0123456789abcdef 00000000000000000001\n"))
	f.Add([]byte("once-ledger 0123456789abcdef0123456789abcdef -0000000000000000001\n"))
	f.Add([]byte("once-ledger 0123456789abcdef0123456789abcdef 0000000000000000000\n\n"))
	f.Add([]byte(""))
	f.Add([]byte("once-ledger"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, seq, err := sqlite.ParseMarker(b)
		if err != nil {
			return
		}
		if seq < 0 || len(id) != 32 {
			t.Fatalf("accepted %q as %q %d", b, id, seq)
		}
		if got := sqlite.FormatMarker(id, seq); got != string(b) {
			t.Fatalf("%q parsed to %q %d, which formats as %q", b, id, seq, got)
		}
	})
}

// A file another client is writing in rollback mode (a new file whose first writer is switching
// it, or a sqlite3 shell's): Open's switch to WAL waits for the writer, as long as busy_timeout,
// instead of failing at once with "locked … busy_timeout 10s" (SQLite's busy handler does not
// wait for the switch; a daemon of a fleet started together on a new file failed so in CI).
func TestOpenWaitsToSwitchToWAL(t *testing.T) {
	_, path := private(t)
	db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(DELETE)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("CREATE TABLE other (x)"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO other VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		tx.Commit()
	}()
	s, err := open(t, path)
	if err != nil {
		t.Fatalf("Open while another client writes: %v", err)
	}
	if _, err := s.Leases(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestGoneWhileOpenReads: a process that only reads (once serve) kept showing a deleted or
// replaced ledger as the ledger, all well, while every once run refused it (69): its reads fail
// with ErrGone too, as its writes do.
func TestGoneWhileOpenReads(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(t *testing.T, path string)
		want string
	}{
		{"deleted", func(t *testing.T, path string) { removeAll(t, path) }, "once.db was deleted while in use"},
		{"replaced", func(t *testing.T, path string) { copyFile(t, path, path) }, "once.db was replaced while in use"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			_, path := private(t)
			s := mustOpen(t, path)
			l, err := s.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "h", RunID: "r", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Begin(ctx, store.Attempt{Task: "t", Slot: "s", RunID: "r", Number: 1, Holder: "h", Token: l.Token, State: store.Running}); err != nil {
				t.Fatal(err)
			}
			c.do(t, path)
			_, err = s.Tasks(ctx, "", 10)
			wantGone(t, err, c.want)
			_, err = s.Leases(ctx)
			wantGone(t, err, c.want)
			_, err = s.History(ctx, store.HistoryQuery{Limit: 10})
			wantGone(t, err, c.want)
			_, err = s.Slot(ctx, "t", "s")
			wantGone(t, err, c.want)
			_, _, err = s.NewestSuccess(ctx, "t", 10)
			wantGone(t, err, c.want)
		})
	}
}
