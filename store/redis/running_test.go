package redis

import (
	"context"
	"slices"
	"testing"

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
	kvtest.Archives(t, harness().DSN)
	kvtest.HistoryIndex(t, harness().DSN, func(t *testing.T, dsn string) {
		s, ctx := raw(t, dsn), context.Background()
		err := s.scan(ctx, "{"+s.prefix+":*}:history", func(key string) error { return s.c.Del(ctx, key).Err() })
		if err == nil {
			err = s.c.Del(ctx, s.historyIndexed(), s.kindsIndexed()).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	kvtest.RunningIndex(t, kvtest.Hooks{
		DSN: harness().DSN,
		Unindex: func(t *testing.T, dsn string) {
			s, ctx := raw(t, dsn), context.Background()
			err := s.scan(ctx, "{"+s.prefix+":*}:fence", func(key string) error { return s.c.HDel(ctx, key, "r").Err() })
			if err == nil {
				err = s.scan(ctx, "{"+s.prefix+":*}:running", func(key string) error { return s.c.Del(ctx, key).Err() })
			}
			if err != nil {
				t.Fatal(err)
			}
		},
		Drop: func(t *testing.T, dsn, task, slot string) {
			s := raw(t, dsn)
			if err := s.c.SRem(context.Background(), s.tkey(task, "running"), slot).Err(); err != nil {
				t.Fatal(err)
			}
		},
		Stray: func(t *testing.T, dsn, task, slot string) {
			s := raw(t, dsn)
			if err := s.c.SAdd(context.Background(), s.tkey(task, "running"), slot).Err(); err != nil {
				t.Fatal(err)
			}
		},
		Listed: func(t *testing.T, dsn, task string) []string {
			s := raw(t, dsn)
			got, err := s.c.SMembers(context.Background(), s.tkey(task, "running")).Result()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			return got
		},
	})
}
