package metrics

import (
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/once-run/once/store"
)

// Config is what the collector reads. Store is required; Fleet is nil without a daemon.
type Config struct {
	Store store.Store
	// Fleet is optional: a running daemon's counters (once daemon --http).
	Fleet FleetStats
	// Now is the collector's clock (default time.Now): it paces the reads of the store and bounds
	// how far ahead of it the tail trusts an entry's date (docs: Long attempts); it never dates
	// an entry of history (the store's times do).
	Now func() time.Time
	// MaxTasks bounds the tasks exported (default 10,000); beyond it, once_tasks_left_out says
	// how many were left out. It also bounds the daemon's per-job series.
	MaxTasks int
	// MinInterval: a scrape within MinInterval of the last read of the store is answered from
	// what that read found, so that two Prometheus servers (or a retry) cost one read
	// (default 1s; negative: read on every scrape).
	MinInterval time.Duration
	// Timeout bounds the store reads of one scrape (default 5s: under Prometheus' default
	// scrape_timeout of 10s, so that a store that hangs is once_store_up 0 rather than a failed
	// scrape). A read cut short is once_store_up 0; the next scrape goes on from where it stopped.
	Timeout time.Duration
}

// FleetStats is a running daemon node, as the collector reads it on every scrape.
type FleetStats interface {
	// FleetStats is the daemon node's counters (those of scheduler.Stats) and, per job, the
	// next fire time and the lag of the last fire. It must be cheap: it is called on every scrape.
	FleetStats() Fleet
}

// Fleet is a daemon node's counters, filled by the daemon (this package does not import it).
type Fleet struct {
	Fired          int64 // slots fired (launched, or handled by the overlap policy)
	Refused        int64 // fires refused because this node's clock is off
	Missed         int64 // missed slots this node recorded
	ReloadFailures int64 // reloads of the jobs file refused
	// AccountsDeferred: accounts a store error put off; AccountsWaiting: jobs waiting for one now.
	AccountsDeferred int64
	AccountsWaiting  int
	ClockOffset      time.Duration // the store's clock minus this node's, last measured
	ClockOK          bool          // the offset is within the daemon's maximum
	Jobs             int           // jobs loaded
	Running          int           // launches in progress on this node
	PerJob           []JobStats    // one per job; at most MaxTasks are exported (by name)
}

// JobStats is one job of a daemon node.
type JobStats struct {
	Job      string
	NextFire time.Time     // when its next slot fires; zero when none is scheduled
	LastFire time.Time     // when it last fired on this node; zero when it has not
	FireLag  time.Duration // of the last fire: when it was launched minus its slot's fire time
}

// Defaults of Config.
const (
	DefaultMaxTasks    = 10000
	DefaultMinInterval = time.Second
	DefaultTimeout     = 5 * time.Second
)

// Collector is once's metrics, read from the store (and a daemon's
// counters). It is safe for concurrent use; scrapes are served one read of the store at a time.
type Collector struct {
	c  Config
	mu sync.Mutex
	t  *tracker
	// Of the last read of the store.
	readAt  time.Time
	readDur time.Duration
	readErr error
}

// New returns a collector of c.Store; it reads nothing before the first scrape.
func New(c Config) (*Collector, error) {
	if c.Store == nil {
		return nil, errors.New("metrics: Config.Store is required")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxTasks <= 0 {
		c.MaxTasks = DefaultMaxTasks
	}
	if c.MinInterval == 0 {
		c.MinInterval = DefaultMinInterval
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	return &Collector{c: c, t: newTracker(c.Store, c.MaxTasks)}, nil
}

// Handler serves the collector in Prometheus' text format (0.0.4), with the Go runtime's and
// this process's metrics; gzipped when the scraper accepts it, as Prometheus does. Mount it at
// /metrics.
func (c *Collector) Handler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w := c.collect()
		collectGo(w)
		collectProcess(w)
		rw.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		rw.Header().Add("Vary", "Accept-Encoding")
		if !acceptsGzip(r.Header.Get("Accept-Encoding")) {
			_ = w.write(rw)
			return
		}
		rw.Header().Set("Content-Encoding", "gzip")
		gz, _ := gzip.NewWriterLevel(rw, gzip.BestSpeed)
		if w.write(gz) == nil {
			_ = gz.Close()
		}
	})
}

// acceptsGzip reads an Accept-Encoding header: gzip (or x-gzip) listed with a weight above 0.
func acceptsGzip(h string) bool {
	for _, part := range strings.Split(h, ",") {
		enc, params, _ := strings.Cut(part, ";")
		if e := strings.ToLower(strings.TrimSpace(enc)); e != "gzip" && e != "x-gzip" {
			continue
		}
		for _, p := range strings.Split(params, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if strings.EqualFold(strings.TrimSpace(k), "q") {
				q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				return err == nil && q > 0
			}
		}
		return true
	}
	return false
}

// collect reads what is new in the store (at most once per MinInterval) and returns the metrics.
// A store that fails is once_store_up 0, with the rest from what was read before.
func (c *Collector) collect() *sink {
	start := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.c.Now()
	if c.readAt.IsZero() || c.c.MinInterval < 0 || now.Sub(c.readAt) >= c.c.MinInterval {
		ctx, cancel := context.WithTimeout(context.Background(), c.c.Timeout)
		c.readErr = c.t.refresh(ctx, now)
		cancel()
		c.readAt, c.readDur = now, time.Since(start)
	}
	w := newSink()
	c.collectTasks(w)
	if c.c.Fleet != nil {
		collectFleet(w, c.c.Fleet.FleetStats(), c.c.MaxTasks)
	}
	up := 1.0
	if c.readErr != nil {
		up = 0
	}
	w.gauge(descStoreUp, up)
	w.gauge(descReadDuration, c.readDur.Seconds())
	w.gauge(descScrapeDuration, time.Since(start).Seconds())
	return w
}

// Err is the error of the last read of the store (nil when it worked), for a server's log.
func (c *Collector) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readErr
}
