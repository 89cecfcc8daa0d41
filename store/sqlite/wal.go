package sqlite

import "context"

// The WAL's length.
//
// Each `once run` is a new process, and the first connection to open the database rebuilds
// SQLite's WAL index from the -wal file: it reads and checksums every frame written since the WAL
// last restarted from its beginning. Once the WAL is long that read is the largest cost of a short
// run (~3 µs a frame on the development VM: 40 % of a skip's process at 1,800 frames). The WAL
// restarts only when a write finds every frame already copied into the database by a checkpoint,
// and what a checkpoint copied is recorded in the WAL index, which the next process rebuilds as
// "nothing copied". So processes that each write once and exit (launches that skip, or find the
// task busy) never restart it, however often SQLite's own autocheckpoint copies it: it grew
// without bound (2,955 frames, 12 MB, after 400 skips).
//
// So journal_size_limit has a restart truncate the -wal file to walLimit, which makes its size a
// bound on what the next open reads; the size is noted after each write (still) and at open; and
// a write that finds the file longer than walLimit first runs a PASSIVE checkpoint, which waits
// for no reader or writer, so that its own frames restart the WAL from the beginning. That costs
// the checkpoint's syncs (the WAL's, then the database file's) about once per walLimit of frames.

// walLimit is the -wal file's size, in bytes, beyond which a write first checkpoints: ~250
// frames of 4 KiB pages, what a few dozen launches write.
const walLimit = 1 << 20

// restartWAL checkpoints, without waiting for anyone, when the -wal file was last seen longer than
// walLimit, so that the write about to begin restarts the WAL. The caller holds the writers'
// queue. A checkpoint that fails or is blocked by a reader is left to a later write: it changes
// what the next open reads, never what the ledger says.
func (s *Store) restartWAL(ctx context.Context) {
	if s.w.wal.Load() <= walLimit {
		return
	}
	_, _ = s.db.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
}
