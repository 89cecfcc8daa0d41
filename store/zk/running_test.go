package zk

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/internal/kvstore/kvtest"
)

// TestRunningIndex: the running index as a ledger an older once wrote leaves it (internal/kvstore/kvtest).
func TestRunningIndex(t *testing.T) {
	raw := func(t *testing.T, dsn string) *Store {
		s, err := Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	del := func(t *testing.T, s *Store, path string) {
		if err := s.c.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatal(err)
		}
	}
	kvtest.Archives(t, harness().DSN)
	kvtest.HistoryIndex(t, harness().DSN, func(t *testing.T, dsn string) {
		s := raw(t, dsn)
		var drop func(p string)
		drop = func(p string) { // the tree under p, then p
			kids, _, err := s.c.Children(p)
			if err != nil && !errors.Is(err, zk.ErrNoNode) {
				t.Fatal(err)
			}
			for _, k := range kids {
				drop(p + "/" + k)
			}
			del(t, s, p)
		}
		drop(s.historyRoot())
		drop(s.kindRoot())
		del(t, s, s.historyIndexed())
		del(t, s, s.kindsIndexed())
	})
	kvtest.RunningIndex(t, kvtest.Hooks{
		DSN: harness().DSN,
		Unindex: func(t *testing.T, dsn string) {
			s := raw(t, dsn)
			tasks, _, err := s.c.Children(s.p + "/a")
			if err != nil && !errors.Is(err, zk.ErrNoNode) {
				t.Fatal(err)
			}
			for _, task := range tasks {
				kids, _, err := s.c.Children(s.p + "/a/" + task)
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range kids {
					del(t, s, s.p+"/a/"+task+"/"+k)
				}
				del(t, s, s.p+"/a/"+task)
			}
		},
		Drop: func(t *testing.T, dsn, task, slot string) {
			s := raw(t, dsn)
			del(t, s, s.runningPath(task, slot))
		},
		Stray: func(t *testing.T, dsn, task, slot string) {
			s := raw(t, dsn)
			ctx := context.Background()
			if err := s.markRunning(ctx, task); err != nil {
				t.Fatal(err)
			}
			if err := s.ensure(ctx, s.runningPath(task, slot)); err != nil {
				t.Fatal(err)
			}
		},
		Listed: func(t *testing.T, dsn, task string) []string {
			s := raw(t, dsn)
			kids, _, err := s.c.Children(s.runningDir(task))
			if err != nil && !errors.Is(err, zk.ErrNoNode) {
				t.Fatal(err)
			}
			var out []string
			for _, k := range kids {
				out = append(out, unesc(k))
			}
			slices.Sort(out)
			return out
		},
	})
}
