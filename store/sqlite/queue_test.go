package sqlite_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/once-run/once/internal/trust"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
)

// holdQueue takes the writers' queue of the ledger at path as another process would (its own open
// file), and returns a function that writes a new sign of life, and one that lets go.
func holdQueue(t *testing.T, path string) (progress func(), release func()) {
	t.Helper()
	f, err := os.OpenFile(sqlite.QueuePath(path), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	n := uint64(0)
	progress = func() {
		n++
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], 1<<63|n)
		if _, err := f.WriteAt(b[:], 0); err != nil {
			t.Error(err)
		}
	}
	var once sync.Once
	release = func() { once.Do(func() { f.Close() }) }
	t.Cleanup(release)
	return progress, release
}

func openBusy(t *testing.T, path string, busy time.Duration) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{BusyTimeout: busy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestQueueFile(t *testing.T) {
	_, path := private(t)
	mustOpen(t, path).Close()
	fi, err := os.Lstat(sqlite.QueuePath(path))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("queue file: %v %v, want a regular file with mode 0600", fi, err)
	}
	if !strings.HasPrefix(fi.Name(), ".") {
		t.Fatalf("queue file %s: want a dot file (no once.db* glob matches it)", fi.Name())
	}

	t.Run("symlink", func(t *testing.T) {
		dir, path := private(t)
		mustOpen(t, path).Close()
		qp := sqlite.QueuePath(path)
		os.Remove(qp)
		if err := os.Symlink(dir+"/elsewhere", qp); err != nil {
			t.Fatal(err)
		}
		_, err := open(t, path)
		if !errors.Is(err, trust.ErrUnsafe) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "symbolic link") {
			t.Fatalf("symlinked queue file: %v", err)
		}
		if _, err := os.Stat(dir + "/elsewhere"); err == nil {
			t.Fatal("the symlink's target was created")
		}
	})
	t.Run("writable by others", func(t *testing.T) {
		_, path := private(t)
		mustOpen(t, path).Close()
		if err := os.Chmod(sqlite.QueuePath(path), 0o666); err != nil {
			t.Fatal(err)
		}
		_, err := open(t, path)
		if !errors.Is(err, trust.ErrUnsafe) || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("queue file writable by others: %v", err)
		}
	})
	t.Run("deleted while in use", func(t *testing.T) {
		// The queue only orders writers; SQLite's own lock keeps them correct without it.
		_, path := private(t)
		s := mustOpen(t, path)
		if err := os.Remove(sqlite.QueuePath(path)); err != nil {
			t.Fatal(err)
		}
		write(t, s, "a")
		write(t, mustOpen(t, path), "b")
	})
}

// A long queue is not a failure: a writer waits past busy_timeout as long as the writers ahead of
// it keep leaving.
func TestQueueWaitsWhileItMoves(t *testing.T) {
	_, path := private(t)
	s := openBusy(t, path, 300*time.Millisecond)
	progress, release := holdQueue(t, path)
	go func() {
		for i := 0; i < 12; i++ {
			time.Sleep(100 * time.Millisecond)
			progress()
		}
		release()
	}()
	began := time.Now()
	write(t, s, "a")
	if d := time.Since(began); d < time.Second {
		t.Fatalf("wrote after %s, while the queue was held for 1.2s", d)
	}
}

// A stuck queue is: no writer left it for busy_timeout. The wait given up on leaves the queue as
// soon as it gets its turn, and the next write works.
func TestQueueStalled(t *testing.T) {
	_, path := private(t)
	s := openBusy(t, path, 200*time.Millisecond)
	_, release := holdQueue(t, path)
	began := time.Now()
	_, err := s.Acquire(context.Background(), store.AcquireRequest{Task: "a", Holder: "h", RunID: "r", TTL: time.Minute})
	d := time.Since(began)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "busy_timeout 200ms") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("write behind a stuck queue: %v", err)
	}
	if d < 150*time.Millisecond || d > 5*time.Second {
		t.Fatalf("gave up after %s, want about 200ms", d)
	}
	t.Logf("message: %v", err)
	// The wait given up on still holds this process's turn; the next write is bounded all the same.
	began = time.Now()
	_, err = s.Acquire(context.Background(), store.AcquireRequest{Task: "a", Holder: "h", RunID: "r", TTL: time.Minute})
	if d := time.Since(began); !errors.Is(err, store.ErrUnavailable) || d > 5*time.Second {
		t.Fatalf("second write behind a stuck queue: %v after %s", err, d)
	}
	release()
	write(t, s, "a") // the abandoned wait got the lock and left
	write(t, s, "b")

	// Given up by the caller: the same.
	_, release = holdQueue(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = s.Acquire(ctx, store.AcquireRequest{Task: "c", Holder: "h", RunID: "r", TTL: time.Minute})
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write whose context ended in the queue: %v", err)
	}
	release()
	write(t, s, "c")
}

// A lazy write is not counted (the marker never counts what the disk may not have), is read back at
// once, and leaves the connection durable for the writes after it.
func TestRecordLazy(t *testing.T) {
	_, path := private(t)
	s := mustOpen(t, path)
	write(t, s, "a")
	_, seq := marker(t, path)
	ctx := context.Background()
	if err := s.RecordLazy(ctx, store.Event{Task: "a", Kind: store.Busy, RunID: "r", Holder: "h", Note: "busy"}); err != nil {
		t.Fatal(err)
	}
	if _, got := marker(t, path); got != seq {
		t.Fatalf("a lazy write was counted: %d, want %d", got, seq)
	}
	es, err := s.History(ctx, store.HistoryQuery{Task: "a"})
	if err != nil || len(es) != 1 || es[0].State != store.Busy {
		t.Fatalf("history: %+v %v", es, err)
	}
	fs, err := s.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Check == "durability" && (f.Level != store.LevelOK || !strings.Contains(f.Message, "synchronous=FULL")) {
			t.Fatalf("after a lazy write: %+v", f)
		}
	}
	write(t, s, "b")
	if _, got := marker(t, path); got != seq+2 {
		t.Fatalf("after a lazy and a durable write: %d, want %d", got, seq+2)
	}
}
