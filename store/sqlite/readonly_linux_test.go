package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/once-run/once/internal/testfs"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
)

// On a file system remounted read-only, OpenReader reads the ledger (the writes in its -wal file
// included), every write through it fails with ErrUnavailable saying why, and Open fails as before,
// with the fix.
func TestOpenReaderOnReadOnlyMount(t *testing.T) {
	mnt, remount := testfs.Tmpfs(t, "700")
	ctx := context.Background()
	path := filepath.Join(mnt, "home", "once.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, store.ClaimRequest{Scope: "sc", Keys: []string{"k1"}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	remount(true)
	if _, err := sqlite.Open(ctx, path, sqlite.Options{}); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "remount it read-write") {
		t.Fatalf("Open on a read-only mount: %v, want ErrUnavailable with the fix", err)
	}
	r, err := sqlite.OpenReader(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatalf("OpenReader on a read-only mount: %v", err)
	}
	defer r.Close()
	keys, err := r.Lookup(ctx, "sc", []string{"k1"})
	if err != nil || len(keys) != 1 || keys[0].Key != "k1" {
		t.Fatalf("Lookup: %v %+v", err, keys)
	}
	if _, err := r.Waiting(ctx); err != nil {
		t.Fatalf("Waiting: %v", err)
	}
	_, err = r.Claim(ctx, store.ClaimRequest{Scope: "sc", Keys: []string{"k2"}})
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "opened read-only (the file system is read-only)") {
		t.Fatalf("a write through a reader: %v, want ErrUnavailable saying it is read-only", err)
	}
	fs, err := r.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fs {
		found = found || f.Check == "access" && f.Level == store.LevelFail
	}
	if !found {
		t.Fatalf("Inspect has no FAIL access finding: %+v", fs)
	}
}
