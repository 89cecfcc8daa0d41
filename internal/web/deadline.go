package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

// DefaultStoreTimeout bounds the store reads of one request (Config.StoreTimeout): a store that
// accepts connections and never answers (a server stopped with SIGSTOP, a frozen VM, a network
// that drops packets) is a 503 naming the store within it, and the request's place (maxInFlight)
// is given back. Without it each page waited on its store client's own timeouts: 10 to 25 s to
// its 503 for PostgreSQL, Redis and etcd, and no answer at all for MySQL and some ZooKeeper reads
// (a read on a connection opened before the hang waits until the client leaves), so eight such
// requests took every place and the dashboard answered nothing but "busy".
const DefaultStoreTimeout = 5 * time.Second

// defaultStoreTimeout is Config.StoreTimeout when 0: DefaultStoreTimeout, longer in this package's
// tests, whose pages over seeded ledgers under -race on a loaded machine take seconds.
var defaultStoreTimeout = DefaultStoreTimeout

// enter takes a place for a request that reads the store and bounds its reads by
// Config.StoreTimeout (/metrics: its collector bounds its own, metrics.Config.Timeout). It
// returns the request to serve and the function that ends it, or ok false when it answered r
// (busy, or the store hangs and no place is free).
func (s *Server) enter(w http.ResponseWriter, r *http.Request) (_ *http.Request, done func(), ok bool) {
	// A scrape has places of its own: a busy dashboard must not fail it (the alerts ride on it),
	// and the collector reads the store at most once per interval however many scrapes come.
	places := s.inFlight
	if r.URL.Path == "/metrics" {
		places = s.scrapes
	}
	if !s.admit(r, places) {
		s.busy(w, r)
		return nil, nil, false
	}
	if r.URL.Path == "/metrics" {
		return r, func() { <-places }, true
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.c.StoreTimeout)
	return r.WithContext(ctx), func() {
		// A request whose deadline ran out while its client still waited met a store that
		// hangs; one that ended before it, a store that answers (or fails at once). Noted
		// before the place is given back: a request waiting for it sees the hang (admit).
		s.noteHang(ctx.Err() == context.DeadlineExceeded && r.Context().Err() == nil)
		cancel()
		<-places
	}, true
}

// noteHang records whether the store hung for the request that just ended.
func (s *Server) noteHang(hung bool) {
	if hung {
		s.hungAt.Store(s.c.Now().UnixNano())
		next := make(chan struct{})
		if prev := s.hung.Swap(&next); prev != nil {
			close(*prev)
		}
		return
	}
	s.hungAt.Store(0)
}

// hangWake returns a channel closed when a request next notes a hang (noteHang). Taken before
// a waiter checks hanging, so a hang noted in between still wakes it.
func (s *Server) hangWake() <-chan struct{} {
	for {
		if p := s.hung.Load(); p != nil {
			return *p
		}
		ch := make(chan struct{})
		s.hung.CompareAndSwap(nil, &ch)
	}
}

// hanging reports whether a request met a store that hangs within the last StoreTimeout, with no
// request answered in time since: a request that finds no free place is then answered at once,
// not queued behind requests that wait for the same store.
func (s *Server) hanging() bool {
	at := s.hungAt.Load()
	return at != 0 && s.c.Now().Sub(time.Unix(0, at)) < s.c.StoreTimeout
}

// storeErr is err as a request's answer says it: a read cut off by the request's store deadline
// names the store and what to check (the store client's own words, "context deadline exceeded"
// or "i/o timeout", said neither); a change cut off so says that it may have been made.
func (s *Server) storeErr(r *http.Request, err error) error {
	// A client that maps the deadline onto its connection (go-redis) fails with its own "i/o
	// timeout" as the deadline passes, maybe before the context says so.
	dl, ok := r.Context().Deadline()
	if !errors.Is(err, context.DeadlineExceeded) && (!ok || time.Now().Before(dl)) {
		return err
	}
	msg := s.hangMsg(err)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		// A write cut off by the deadline may have reached the store (etcd applies a request whose
		// client gave up): sending it again blindly could pause what was resumed meanwhile.
		msg += "; the change may have been made before the store stopped answering: look (reload the page, or read it through the API) before sending it again"
	}
	return fmt.Errorf("%w: %s", store.ErrUnavailable, msg)
}

// hangMsg says that the store did not answer within StoreTimeout, naming it and what to check.
func (s *Server) hangMsg(cause error) string {
	msg := fmt.Sprintf("the store %s did not answer within %s: check that its server is running, not stopped or overloaded, and reachable from this host (once doctor --store … tells); a store that is only slow needs a longer --store-timeout; this server tries it again at each request and recovers by itself",
		s.c.DSN, s.c.StoreTimeout)
	if cause != nil {
		msg += " (" + strings.TrimPrefix(cause.Error(), "store: unavailable: ") + ")"
	}
	return msg
}

// hangAnswer answers a request that found no free place while the store hangs: 503 saying so,
// at once.
func (s *Server) hangAnswer(w http.ResponseWriter, r *http.Request) {
	err := fmt.Errorf("%w: %s", store.ErrUnavailable, s.hangMsg(nil))
	switch {
	case strings.HasPrefix(r.URL.Path, "/api/"):
		s.apiFail(w, r, err)
	case r.URL.Path == "/healthz/store":
		s.c.Log.Warn("request failed", "path", r.URL.Path, "err", err)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "store unavailable: %s\n", s.hangMsg(nil))
	default:
		s.failErr(w, r, err)
	}
}

// storeHealth answers GET /healthz/store: 200 when one short read of the store (a page of one task
// name) is answered within StoreTimeout, else 503 with what was wrong. Plain text, as /healthz.
func (s *Server) storeHealth(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	_, err := store.ListTasks(r.Context(), s.c.Store, "", 1)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		err = s.storeErr(r, err)
		s.c.Log.Warn("request failed", "path", r.URL.Path, "err", err)
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "store unavailable: %s\n", strings.TrimPrefix(err.Error(), "store: unavailable: "))
		return
	}
	fmt.Fprintf(w, "ok: the store %s answered in %s\n", s.c.DSN, time.Since(start).Round(time.Millisecond))
}
