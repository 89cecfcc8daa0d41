package keys_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/once-run/once/internal/keystest"
)

func ctxT(t testing.TB, d time.Duration) context.Context { return keystest.Context(t, d) }

func seq(prefix string, lo, hi int) []string {
	out := make([]string, 0, hi-lo)
	for i := lo; i < hi; i++ {
		out = append(out, fmt.Sprintf("%s%07d", prefix, i))
	}
	return out
}

// sqliteDSN: see keystest.SQLiteDSN (the example opens SQLite this way too).
func sqliteDSN(path string) string { return keystest.SQLiteDSN(path) }
