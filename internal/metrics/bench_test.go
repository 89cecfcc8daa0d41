package metrics

import (
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// BenchmarkScrape: /metrics of a ledger of 1,000 tasks (100,000 attempts, 100 runs holding their
// leases), served by Handler in the text format.
//
//   - steady: nothing new since the last scrape (the leases, the slots waiting, the overlap);
//   - new-run: one run ended since the last scrape (its write is not timed);
//   - first: a new collector's first scrape (its window of 10,000 entries and up to 0.5 s of
//     tasks' first reads).
func BenchmarkScrape(b *testing.B) {
	const tasks, attempts, running = 1000, 100000, 100
	st, path := openStore(b)
	l := &ledger{tb: b, st: st}
	l.run("task-0", "first", store.Succeeded)
	seedAttempts(b, path, tasks, attempts)
	for i := range running {
		ls := l.acquire(fmt.Sprintf("task-%d", i), "node", time.Hour)
		l.begin(ls, "long")
	}
	serve := func(c *Collector) int {
		rec := httptest.NewRecorder()
		c.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 {
			b.Fatalf("/metrics: %d", rec.Code)
		}
		n := rec.Body.Len()
		_, _ = io.Copy(io.Discard, rec.Body)
		return n
	}
	warm := func() *Collector {
		c := newCollector(b, Config{Store: st})
		for len(c.t.toLoad) > 0 || !c.t.started {
			serve(c)
		}
		return c
	}
	b.Run("steady", func(b *testing.B) {
		c := warm()
		var size int
		b.ResetTimer()
		for range b.N {
			size = serve(c)
		}
		b.ReportMetric(float64(size), "bytes/scrape")
		b.ReportMetric(float64(c.readDur.Microseconds())/1e3, "ms-store-read/scrape")
	})
	b.Run("new-run", func(b *testing.B) {
		c := warm()
		b.ResetTimer()
		for i := range b.N {
			b.StopTimer()
			l.run(fmt.Sprintf("task-%d", 500+i%500), "bench", store.Succeeded)
			b.StartTimer()
			serve(c)
		}
		b.ReportMetric(float64(c.readDur.Microseconds())/1e3, "ms-store-read/scrape")
	})
	b.Run("first", func(b *testing.B) {
		for range b.N {
			serve(newCollector(b, Config{Store: st}))
		}
	})
}
