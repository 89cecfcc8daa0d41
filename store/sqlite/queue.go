package sqlite

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/once-run/once/internal/trust"
	"github.com/once-run/once/store"
)

// The writers' queue.
//
// SQLite lets one transaction write at a time and makes the others wait in its busy handler,
// which polls: it sleeps 1, 2, 5 … then 100 ms between tries. With hundreds of processes writing
// at once (every daily job of a host starting at midnight), the lock sits idle while the waiters
// sleep, and whoever happens to poll first wins: a waiter can lose every round until busy_timeout
// and fail, though the queue was moving all along. So every write transaction first takes an
// exclusive flock(2) on a file next to the database, blocking: the kernel queues the waiters and
// wakes the next one the moment the writer before it commits, and SQLite's lock is then almost
// always free. The queue decides nothing: correctness is still SQLite's own lock (a writer that
// does not queue, such as the sqlite3 shell, is simply waited for in the busy handler), so a
// queue file deleted while in use only costs speed.
//
// A long queue is not a failure; a stuck one is. Each writer leaving the queue writes a new value
// into the file (no fsync: it is a sign of life, not data), and a waiter gives up with
// store.ErrUnavailable only when that value has not changed for busy_timeout: the writer ahead
// has held the lock that long (stopped, or its disk hangs), the same rule as SQLite's own.

// QueuePath is the writers' queue file of the ledger in database file path: .NAME.queue next to it.
func QueuePath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".queue")
}

type writerQueue struct {
	f      *os.File
	closed atomic.Bool
	// turn lets one goroutine of this process at a time wait or hold: flock(2) locks belong to the
	// open file, which the goroutines of a process share, so the kernel cannot tell them apart.
	turn chan struct{}
	mine uint64        // this process's mark: pid << 32
	left atomic.Uint64 // how many times this process left the queue
}

// openQueue opens (creating it when missing, with mode) the queue file of the database at path,
// and checks it like the ledger's other files.
func openQueue(path string, mode uint32, pol trust.Policy) (*writerQueue, error) {
	qp := QueuePath(path)
	fd, err := unix.Open(qp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	created := err == nil
	if errors.Is(err, unix.EEXIST) {
		fd, err = unix.Open(qp, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symbolic link; fix: rm %s", trust.ErrUnsafe, qp, trust.Quote(qp))
		}
		return nil, fmt.Errorf("%s: %w", qp, err)
	}
	f := os.NewFile(uintptr(fd), qp)
	if created {
		// Whatever the umask left.
		if err := unix.Fchmod(fd, mode); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", qp, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", qp, err)
	}
	if err := trust.Stat(qp, &st, pol); err != nil {
		f.Close()
		return nil, err
	}
	return &writerQueue{f: f, turn: make(chan struct{}, 1), mine: uint64(os.Getpid()) << 32}, nil
}

// close closes the queue file once no goroutine of this process holds or waits in the queue: a
// write still in flight when the store is closed finishes first, and later ones fail.
func (q *writerQueue) close() {
	if q == nil {
		return
	}
	q.turn <- struct{}{}
	q.closed.Store(true)
	q.f.Close()
	<-q.turn
}

// errQueueClosed is returned by enter after close.
var errQueueClosed = errors.New("sqlite: the store is closed")

// errStalled is returned by enter when the writer ahead made no progress for the whole bound.
var errStalled = errors.New("stalled")

// enter waits for this process's turn and then for the file's lock. It fails when ctx ends, or
// with errStalled when no writer left the queue for stall (the wait for the turn included: a wait
// given up on keeps the turn until the kernel grants it the lock).
func (q *writerQueue) enter(ctx context.Context, stall time.Duration) error {
	seen := q.progress()
	tick := time.NewTicker(stall)
	defer tick.Stop()
	stalled := func() bool {
		p := q.progress()
		moved := p != seen
		seen = p
		return !moved
	}
	for waiting := true; waiting; {
		select {
		case q.turn <- struct{}{}:
			waiting = false
			if q.closed.Load() {
				<-q.turn
				return errQueueClosed
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if stalled() {
				return errStalled
			}
		}
	}
	fd := int(q.f.Fd())
	if err := flock(fd, unix.LOCK_EX|unix.LOCK_NB); err == nil {
		return nil
	} else if !errors.Is(err, unix.EWOULDBLOCK) {
		<-q.turn
		return err
	}
	// Block in the kernel's queue. The call cannot be called off, so a wait given up on is left
	// to finish in its goroutine, which then leaves at once; the turn is held until then.
	done := make(chan error, 1)
	go func() { done <- flock(fd, unix.LOCK_EX) }()
	giveUp := func() {
		go func() {
			if <-done == nil {
				q.leave()
				return
			}
			<-q.turn
		}()
	}
	for {
		select {
		case err := <-done:
			if err != nil {
				<-q.turn
			}
			return err
		case <-ctx.Done():
			giveUp()
			return ctx.Err()
		case <-tick.C:
			if stalled() {
				giveUp()
				return errStalled
			}
		}
	}
}

// leave marks progress, unlocks and gives the turn to the next goroutine of this process.
func (q *writerQueue) leave() {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], q.mine|q.left.Add(1)&0xffffffff)
	_, _ = q.f.WriteAt(b[:], 0) // a sign of life for the waiters; losing one costs nothing
	_ = flock(int(q.f.Fd()), unix.LOCK_UN)
	<-q.turn
}

// progress reads the mark the last writer to leave wrote.
func (q *writerQueue) progress() uint64 {
	var b [8]byte
	n, _ := q.f.ReadAt(b[:], 0)
	if n < len(b) {
		return 0
	}
	return binary.LittleEndian.Uint64(b[:])
}

func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// queued runs fn holding the writers' queue (when the store has one).
func (s *Store) queued(ctx context.Context, fn func() error) error {
	if s.q == nil {
		return fn()
	}
	if err := s.q.enter(ctx, s.busy); err != nil {
		if errors.Is(err, errStalled) {
			return fmt.Errorf("%w: sqlite %s: a writer has held the ledger for longer than busy_timeout %s and the writers queued behind it made no progress (is a once process stopped, or the disk hung?); retry, or raise ?busy_timeout=",
				store.ErrUnavailable, s.path, s.busy)
		}
		return s.mapErr(err)
	}
	defer s.q.leave()
	return fn()
}
