package flock_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/once-run/once/flock"
)

// BenchmarkWaitWake: b.N waiters, each on a lock its holder releases 200 ms + i·5 ms later; how
// long after the release each held it (p50/p99 metrics, µs), for flock.Acquire's wait and for the
// kernel's blocking flock(2), which `flock -w` uses (bench/wait-wakeup.sh).
func BenchmarkWaitWake(b *testing.B) {
	for _, w := range []struct {
		name string
		wait func(dir, task string) (release func(), err error)
	}{
		{"once", func(dir, task string) (func(), error) {
			l, err := flock.Acquire(context.Background(), dir, task, 20*time.Second)
			if err != nil {
				return nil, err
			}
			return func() { l.Release() }, nil
		}},
		{"kernel-flock", func(dir, task string) (func(), error) {
			f, err := os.OpenFile(filepath.Join(dir, flock.FileName(task)), os.O_RDWR, 0)
			if err != nil {
				return nil, err
			}
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
				f.Close()
				return nil, err
			}
			return func() { f.Close() }, nil
		}},
	} {
		b.Run(w.name, func(b *testing.B) {
			dir := b.TempDir()
			late := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			for i := range b.N {
				task := fmt.Sprint("b", i)
				l, err := flock.Acquire(context.Background(), dir, task, 0)
				if err != nil {
					b.Fatal(err)
				}
				released := make(chan time.Time, 1)
				go func() {
					time.Sleep(200*time.Millisecond + time.Duration(i)*5*time.Millisecond)
					at := time.Now()
					l.Release()
					released <- at
				}()
				wg.Go(func() {
					release, err := w.wait(dir, task)
					got := time.Now()
					if err != nil {
						b.Error(err)
						return
					}
					late[i] = got.Sub(<-released)
					release()
				})
			}
			wg.Wait()
			slices.Sort(late)
			b.ReportMetric(float64(late[len(late)/2])/1e3, "p50-µs")
			b.ReportMetric(float64(late[(len(late)-1)*99/100])/1e3, "p99-µs")
			b.ReportMetric(0, "ns/op")
		})
	}
}
