package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the escape-lost fault write-locks a SQLite store
)

// waitEscapers waits until the witness in dir has started its three escapers.
func waitEscapers(ctx context.Context, dir string, d time.Duration) error {
	f := filepath.Join(dir, escapersFile)
	for deadline := time.Now().Add(d); ; {
		if len(readPids(f)) >= 3 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of 3 escapers after %s", len(readPids(f)), d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// aliveEscapers lists the escapers of the trial in dir that are still alive.
func aliveEscapers(dir string) []int {
	var out []int
	for _, pid := range readPids(filepath.Join(dir, escapersFile)) {
		if alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// cutOff makes host h's store unusable to it for d, so that its lease cannot be renewed: its proxy
// refuses and closes connections (networked stores), or the database file is write-locked (SQLite,
// whose file every host shares).
func (r *Runner) cutOff(ctx context.Context, h *simHost, d time.Duration) error {
	if h.proxy != nil {
		h.proxy.Set(Cut)
		time.Sleep(d)
		h.proxy.Heal()
		return nil
	}
	path := strings.TrimPrefix(r.cfg.Store.DSN, "sqlite://")
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return fmt.Errorf("chaos: open %s: %w", path, err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("chaos: open %s: %w", path, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 10000; BEGIN EXCLUSIVE"); err != nil {
		return fmt.Errorf("chaos: write-lock %s: %w", path, err)
	}
	time.Sleep(d)
	_, err = conn.ExecContext(ctx, "ROLLBACK")
	return err
}
