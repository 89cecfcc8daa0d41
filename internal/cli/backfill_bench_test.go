package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/once-run/once"
	"github.com/once-run/once/store/storetest"
)

// BenchmarkBackfill: once backfill over a week of minutely slots (10,080) on the embedded SQLite
// store, and on PostgreSQL and MySQL/MariaDB when ONCE_TEST_POSTGRES, ONCE_TEST_MYSQL name a test
// server (a fresh prefix), per slot (ns/slot; docs/benchmarks.md, "once backfill over years of
// minutes").
// dry-run: --dry-run, one slot in ten succeeded: enumerating the slots, reading their states,
// deciding and writing the rows. done: the backfill itself over slots that all succeeded, each
// read and skipped under the lease (a command would cost its process on top).
func BenchmarkBackfill(b *testing.B) {
	b.Setenv("ONCE_HOME", b.TempDir())
	for _, k := range []string{"ONCE_STORE", "ONCE_STORE_PASSWORD_FILE"} {
		b.Setenv(k, "")
		os.Unsetenv(k)
	}
	benchBackfill(b)
	for _, srv := range []struct{ name, env string }{{"postgres", "ONCE_TEST_POSTGRES"}, {"mysql", "ONCE_TEST_MYSQL"}} {
		b.Run(srv.name, func(b *testing.B) {
			b.Setenv("ONCE_STORE", storetest.WithPrefix(b, storetest.ServerDSN(b, srv.env, srv.name)))
			benchBackfill(b)
		})
	}
}

// benchBackfill runs BenchmarkBackfill's cases on the store the once command opens.
func benchBackfill(b *testing.B) {
	const n = 7 * 24 * 60
	seedBackfill(b, "dry", n, 10)
	seedBackfill(b, "done", n, 1)
	for _, c := range []struct {
		name, task, want string
		dry              bool
	}{
		{"dry-run", "dry", fmt.Sprintf("%d slots: %d to run, %d done", n, n-n/10, n/10), true},
		{"done", "done", fmt.Sprintf("%d slots: 0 ran (0 succeeded, 0 failed), %d already done", n, n), false},
	} {
		b.Run(c.name, func(b *testing.B) {
			args := []string{"backfill", "--task", c.task, "--per", "minute", "--from", "2025-01-01", "--to", "2025-01-07", "--max", "100000"}
			if c.dry {
				args = append(args, "--dry-run")
			}
			args = append(args, "--", "true")
			var out bytes.Buffer
			for b.Loop() {
				out.Reset()
				var stderr bytes.Buffer
				if code := Run(context.Background(), args, strings.NewReader(""), &out, &stderr); code != ExitOK {
					b.Fatalf("%v: %d %s", args, code, stderr.String())
				}
				out.Write(stderr.Bytes())
			}
			if !strings.Contains(out.String(), c.want) {
				b.Fatalf("want %q in the summary:\n%s", c.want, out.String()[max(0, out.Len()-300):])
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/slot")
		})
	}
}

// seedBackfill records a succeeded attempt of task for every every-th minute of the first n of
// 2025, in the store the once command opens (ONCE_HOME).
func seedBackfill(tb testing.TB, task string, n, every int) {
	tb.Helper()
	ctx := context.Background()
	s, _, err := (&app{logFormat: "text"}).open(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	var slots []string
	for i := 0; i < n; i += every {
		slots = append(slots, fmt.Sprintf("2025-01-%02dT%02d:%02d", 1+i/1440, i/60%24, i%60))
	}
	o := once.Options{Store: s, Task: task}
	if _, err := once.Sequence(ctx, o, slots, once.SeqOptions{Quiet: true}, func(context.Context, *once.Run) error { return nil }); err != nil {
		tb.Fatal(err)
	}
}
