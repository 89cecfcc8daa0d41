package web

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// Config is what a Server serves.
type Config struct {
	Store store.Store
	// DSN is the store's DSN as shown on pages: store.Redact is applied to it again here.
	DSN string
	// Token is the bearer token every change needs; "" makes the server read-only.
	Token string
	// ReadsNeedToken makes every read need the token too, on a loopback listener as well (where
	// every local user, and a proxy on this host, can connect). It needs a Token.
	ReadsNeedToken bool
	// Jobs, when set, gives the daemon's jobs now (once daemon --http, once serve --jobs).
	Jobs func() []scheduler.Job
	// Metrics, when set, is served at /metrics.
	Metrics http.Handler
	// Log receives one line per change made and per failed request; nil discards.
	Log *slog.Logger
	// Now is the clock of "now" on pages (the timeline's end); nil is time.Now.
	Now func() time.Time
	// Version is shown in the footer.
	Version string
	// StoreTimeout bounds the store reads of one request (/metrics has its collector's own
	// bound); 0 is DefaultStoreTimeout.
	StoreTimeout time.Duration
}

// Server serves a store over HTTP. Create it with New.
type Server struct {
	c   Config
	mux *http.ServeMux
	// loopback is whether the listener is on a loopback address: only then are reads open
	// without the token.
	loopback bool
	tls      bool
	// pwHidden is whether Config.DSN had a password that Redact hid: the resolve commands'
	// --store needs it written back.
	pwHidden bool
	// inFlight holds a token per request reading the store now (at most maxInFlight), scrapes one
	// per /metrics request (at most maxScrapes); busyWait is how long one more waits for a token
	// before it is refused.
	inFlight, scrapes chan struct{}
	busyWait          time.Duration
	// limit holds token checks from addresses that sent too many wrong tokens (limit.go).
	limit *limiter
	// success keeps the overview's last successes of failing tasks (lastsuccess.go).
	success successCache
	// hungAt is when (Config.Now, UnixNano) a request last met a store that did not answer
	// within StoreTimeout; 0 since a request ended in time (deadline.go).
	hungAt atomic.Int64
	// hung is closed, and replaced, when a request notes a hang: it wakes the requests waiting in
	// admit for a place, which then give up at once (deadline.go, hangWake).
	hung atomic.Pointer[chan struct{}]
}

// maxInFlight bounds the requests that read the store at once. A page fans out to many reads
// (a page of scopes counts up to 50,000 keys), and every local user may read on loopback: without
// a bound, parallel requests could keep a store the whole fleet shares busy.
const maxInFlight = 8

// maxScrapes bounds the /metrics requests answered at once, apart from maxInFlight: two
// Prometheus servers of an HA pair scrape at once. The collector reads the store at most once
// per metrics.Config.MinInterval, one scrape at a time, whatever their number.
const maxScrapes = 2

// New checks c and returns a server. Its Handler is ready at once; Serve listens.
func New(c Config) (*Server, error) {
	if c.Store == nil {
		return nil, errors.New("web: Config.Store is required")
	}
	if c.ReadsNeedToken && c.Token == "" {
		return nil, fmt.Errorf("%w: Config.ReadsNeedToken without a Token would let nobody read", ErrNeedsToken)
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = defaultStoreTimeout
	}
	red := store.Redact(c.DSN)
	s := &Server{c: c, mux: http.NewServeMux(), loopback: true, pwHidden: red != c.DSN,
		inFlight: make(chan struct{}, maxInFlight), scrapes: make(chan struct{}, maxScrapes), busyWait: 10 * time.Second,
		success: successCache{m: map[string]cachedSuccess{}, read: store.ReadLastSuccess}}
	s.c.DSN = red
	s.limit = newLimiter(c.Now, c.Log)
	s.routes()
	return s, nil
}

// Handler is the whole server as an http.Handler, access rules and headers included. Reads are
// open as on a loopback listener unless Serve said otherwise.
func (s *Server) Handler() http.Handler { return s.guard(s.mux) }

// ErrNeedsToken is returned by Serve for a listener beyond loopback without a token, and by New
// for Config.ReadsNeedToken without one.
var ErrNeedsToken = errors.New("web: a listener beyond loopback needs a token")

// Serve answers on ln until ctx ends, then stops within 5 s. With cert and key files it serves
// TLS. A listener that is not on a loopback address needs Config.Token: every read needs it too.
func (s *Server) Serve(ctx context.Context, ln net.Listener, certFile, keyFile string) error {
	s.loopback = IsLoopback(ln.Addr())
	if !s.loopback && s.c.Token == "" {
		ln.Close()
		return fmt.Errorf("%w: %s is reachable from other hosts", ErrNeedsToken, ln.Addr())
	}
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.c.Log.Handler(), slog.LevelWarn),
	}
	if certFile != "" {
		s.tls = true
		hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	done := make(chan error, 1)
	go func() {
		if s.tls {
			done <- hs.ServeTLS(ln, certFile, keyFile)
			return
		}
		done <- hs.Serve(ln)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := hs.Shutdown(sctx)
	if errors.Is(<-done, http.ErrServerClosed) || err != nil {
		return err
	}
	return nil
}

// IsLoopback reports whether addr is on a loopback address (127.0.0.0/8, ::1).
func IsLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

func (s *Server) routes() {
	m := s.mux
	// The JSON API (api.go).
	m.HandleFunc("GET /api/v1/tasks", s.apiTasks)
	m.HandleFunc("GET /api/v1/history", s.apiHistory)
	m.HandleFunc("GET /api/v1/slot", s.apiSlot)
	m.HandleFunc("GET /api/v1/leases", s.apiLeases)
	m.HandleFunc("GET /api/v1/running", s.apiRunning)
	m.HandleFunc("GET /api/v1/review", s.apiReview)
	m.HandleFunc("POST /api/v1/review/resolve", s.write(s.apiResolve))
	m.HandleFunc("GET /api/v1/timeline", s.apiTimeline)
	m.HandleFunc("GET /api/v1/jobs", s.apiJobs)
	m.HandleFunc("GET /api/v1/keys", s.apiKeys)
	m.HandleFunc("GET /api/v1/scopes", s.apiScopes)
	m.HandleFunc("POST /api/v1/jobs/{name}/{action}", s.write(s.apiJobAction))
	// A change asked for with another method (curl without -d is a GET) is told so: the catch-all
	// below answered it "no such API call", though the call exists.
	for _, p := range []string{"/api/v1/review/resolve", "/api/v1/jobs/{name}/{action}"} {
		m.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", http.MethodPost)
			apiError(w, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": this call changes something: send it as POST (see docs/api.md)")
		})
	}
	m.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotFound, "no such API call: see docs/api.md")
	})
	if s.c.Metrics != nil {
		m.Handle("GET /metrics", s.c.Metrics)
	}
	// The dashboard (pages.go).
	m.HandleFunc("GET /{$}", s.pageOverview)
	m.HandleFunc("GET /timeline", s.pageTimeline)
	m.HandleFunc("GET /review", s.pageReview)
	m.HandleFunc("POST /review", s.formWrite(s.formResolve))
	m.HandleFunc("GET /leases", s.pageLeases)
	m.HandleFunc("GET /slot", s.pageSlot)
	m.HandleFunc("GET /jobs", s.pageJobs)
	m.HandleFunc("GET /keys", s.pageKeys)
	m.HandleFunc("POST /jobs", s.formWrite(s.formJob))
	m.HandleFunc("GET /login", s.pageLogin)
	m.HandleFunc("POST /login", s.formLogin)
	m.HandleFunc("POST /logout", s.formLogout)
	m.Handle("GET /static/", noListing(http.FileServerFS(staticFS)))
	m.HandleFunc("GET /healthz/store", s.storeHealth)
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
}

// noListing serves the page's files, not a listing of them: a directory (/static/) is 404.
func noListing(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}
