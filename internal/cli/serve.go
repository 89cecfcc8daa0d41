package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/once-run/once/internal/metrics"
	"github.com/once-run/once/internal/web"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// httpFlags are once serve's flags, shared with once daemon --http.
type httpFlags struct {
	listen, tokenFile, certFile, keyFile string
	// readsNeedToken closes reads on loopback too (web.Config.ReadsNeedToken).
	readsNeedToken bool
	// storeTimeout bounds one request's reads of the store (web.Config.StoreTimeout).
	storeTimeout time.Duration
}

// minToken is the shortest token taken: a token guards every change, so it is not a word.
const minToken = 16

func (h *httpFlags) add(fl *pflag.FlagSet, listenFlag, listenDefault, listenUsage string) {
	fl.StringVar(&h.listen, listenFlag, listenDefault, listenUsage)
	fl.StringVar(&h.tokenFile, "token-file", "", "the bearer token every change needs (and every read beyond loopback), in a file only you can read (env ONCE_SERVE_TOKEN_FILE)")
	fl.StringVar(&h.certFile, "tls-cert", "", "serve HTTPS with this certificate file (PEM; with --tls-key)")
	fl.StringVar(&h.keyFile, "tls-key", "", "the certificate's private key file (PEM)")
	fl.BoolVar(&h.readsNeedToken, "reads-need-token", false, "every read needs the token, on loopback too (a host with other users, or a proxy on this host)")
	durationVar(fl, &h.storeTimeout, "store-timeout", web.DefaultStoreTimeout, 5*time.Minute, "longest a page or API call waits for the store before it answers 503 naming it (at least 1s)")
}

// token checks --store-timeout, then reads the token from --token-file (or ONCE_SERVE_TOKEN_FILE), or ONCE_SERVE_TOKEN; ""
// without either. The file follows the password file's rules: the file itself, yours, mode 0600.
func (h *httpFlags) token() (string, error) {
	if h.storeTimeout < time.Second {
		return "", usage("--store-timeout %s is too short: give at least 1s (a page reads the store several times)", h.storeTimeout)
	}
	if err := envNotEmpty("ONCE_SERVE_TOKEN_FILE", "ONCE_SERVE_TOKEN"); err != nil && h.tokenFile == "" {
		return "", err // an unset variable would have made a read-only server, silently
	}
	// ONCE_SERVE_TOKEN is taken out of the environment, used or not: every command once daemon
	// --http starts would inherit it, and one that prints its environment (env on failure, a
	// debug dump) puts it in the output tail the dashboard shows to readers, who need no token
	// on loopback. A job that needs it is given it in its jobs file's env.
	defer os.Unsetenv("ONCE_SERVE_TOKEN")
	path, src := h.tokenFile, "--token-file"
	if path == "" {
		path, src = os.Getenv("ONCE_SERVE_TOKEN_FILE"), "ONCE_SERVE_TOKEN_FILE"
	}
	var tok string
	switch {
	case path != "":
		t, err := readPasswordFile(path)
		if err != nil {
			return "", usage("%s %s: %v", src, path, err)
		}
		tok = t
	case os.Getenv("ONCE_SERVE_TOKEN") != "":
		tok, src = os.Getenv("ONCE_SERVE_TOKEN"), "ONCE_SERVE_TOKEN"
	default:
		return "", nil
	}
	if strings.TrimSpace(tok) != tok || strings.ContainsFunc(tok, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		// Clients drop spaces at a header's ends and the login form trims them: the server would
		// start, and refuse every token given to it.
		return "", usage("%s: the token has whitespace at an end or a control character, which no client can send back (an HTTP header drops them): remove it (openssl rand -hex 32 gives one without)", src)
	}
	if len(tok) < minToken {
		return "", usage("%s: the token is %d characters; give at least %d (e.g. openssl rand -hex 32 > token; chmod 600 token)", src, len(tok), minToken)
	}
	return tok, nil
}

// listener checks the flags and opens the listener: beyond loopback only with a token.
func (h *httpFlags) listener(flag, token string) (net.Listener, error) {
	if (h.certFile == "") != (h.keyFile == "") {
		return nil, usage("give --tls-cert and --tls-key together")
	}
	// Read before listening (64, a bad flag), not at the first request's handshake: once serve
	// logged "serving https://…" and exited 69, and once daemon --http ran its jobs without the
	// dashboard it was asked for, saying so in one log line.
	if h.certFile != "" {
		if _, err := tls.LoadX509KeyPair(h.certFile, h.keyFile); err != nil {
			return nil, usage("--tls-cert %s --tls-key %s: %v: give a PEM certificate and its private key", h.certFile, h.keyFile, err)
		}
	}
	if h.readsNeedToken && token == "" {
		return nil, usage("--reads-need-token: give the token with --token-file (or ONCE_SERVE_TOKEN_FILE)")
	}
	host, port, err := net.SplitHostPort(h.listen)
	if err != nil {
		return nil, usage("%s %q: give HOST:PORT, e.g. 127.0.0.1:8080", flag, h.listen)
	}
	// A port that is not a number from 0 to 65535 is the flag's fault (64), not the network's (69);
	// a service name such as "http" is left to net.Listen.
	if n, err := strconv.Atoi(port); err == nil && (n < 0 || n > 65535) || port == "" {
		return nil, usage("%s %q: the port must be 0 to 65535, e.g. 127.0.0.1:8080", flag, h.listen)
	}
	ln, err := net.Listen("tcp", h.listen)
	if err != nil {
		return nil, exit(ExitUnavailable, "%s %s: cannot listen: %v", flag, h.listen, err)
	}
	if !web.IsLoopback(ln.Addr()) && token == "" {
		ln.Close()
		return nil, usage("%s %s: reachable from other hosts (host %q), so every read needs a token: give --token-file, or listen on 127.0.0.1", flag, h.listen, host)
	}
	return ln, nil
}

func (a *app) serveCmd() *cobra.Command {
	var h httpFlags
	var jobsPath string
	c := &cobra.Command{
		Use:   "serve [--listen ADDR] [--token-file FILE] [--jobs PATH]",
		Short: "Serve the store over HTTP: a dashboard, a JSON API (/api/v1) and Prometheus metrics (/metrics)",
		Long: `Serve the store (--store, ONCE_STORE) over HTTP: the dashboard (overview, timeline, review queue,
live leases, run detail, jobs), the JSON API under /api/v1 (docs/api.md) and /metrics for Prometheus
(docs/metrics.md).

It listens on 127.0.0.1:8080 by default. On loopback, reads need no credentials (unless
--reads-need-token, or the request came through a proxy); every change
(resolve, pause, resume, trigger) needs the bearer token of --token-file (or ONCE_SERVE_TOKEN), and
a browser logs in with it once. Without a token the server is read-only. A listener beyond loopback
needs the token for every read too. --tls-cert and --tls-key serve HTTPS. --jobs PATH shows the
daemon's jobs with their next fire times and lets a person pause, resume or trigger them.`,
		Example: `  once serve
  openssl rand -hex 32 > ~/.once-token && chmod 600 ~/.once-token
  once serve --listen 0.0.0.0:8443 --token-file ~/.once-token --tls-cert cert.pem --tls-key key.pem --jobs /etc/once/jobs.d
  curl -s localhost:8080/api/v1/review | jq '.review[].task'`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var jobs func() []scheduler.Job
			if jobsPath != "" {
				js, err := loadJobs(jobsPath)
				if err != nil {
					return err
				}
				jobs = func() []scheduler.Job { return js }
			}
			return a.serve(c.Context(), &h, jobs, nil)
		},
	}
	h.add(c.Flags(), "listen", "127.0.0.1:8080", "the address to listen on (HOST:PORT)")
	c.Flags().StringVar(&jobsPath, "jobs", "", "the daemon's jobs file (or directory): show its jobs, and pause, resume and trigger them")
	return c
}

// serviceLogger is the logger of a service (once daemon, once serve): at info unless told
// otherwise, terminal or not, since its log is its record.
func (a *app) serviceLogger() (*slog.Logger, error) {
	if a.logLevel == "" && a.verbose == 0 && os.Getenv("ONCE_LOG_LEVEL") == "" {
		a.logLevel = "info"
	}
	return a.logger()
}

// fleetStats gives a daemon's counters to the metrics (once daemon --http).
type fleetStats struct{ sch *scheduler.Scheduler }

func (f fleetStats) FleetStats() metrics.Fleet {
	st := f.sch.Stats()
	out := metrics.Fleet{Fired: st.Fired, Refused: st.Refused, Missed: st.Missed, ReloadFailures: st.ReloadFailures,
		AccountsDeferred: st.AccountsDeferred, AccountsWaiting: st.AccountsWaiting,
		ClockOffset: st.ClockOffset, ClockOK: st.ClockOK, Jobs: st.Jobs, Running: st.Running}
	for _, j := range st.PerJob {
		out.PerJob = append(out.PerJob, metrics.JobStats{Job: j.Name, NextFire: j.Next, LastFire: j.LastFire, FireLag: j.LastLag})
	}
	return out
}

// serve runs once serve until a stop signal (serveStops).
func (a *app) serve(ctx context.Context, h *httpFlags, jobs func() []scheduler.Job, fleet metrics.FleetStats) error {
	log, err := a.serviceLogger()
	if err != nil {
		return err
	}
	tok, err := h.token()
	if err != nil {
		return err
	}
	s, dsn, err := a.openToRead(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := h.listener("--listen", tok)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, serveStops()...)
	defer stop()
	quit := make(chan os.Signal, 1)
	signal.Notify(quit, syscall.SIGQUIT) // here, not in quitStops: caught from the listener's first moment
	defer signal.Stop(quit)
	go a.quitStops(ctx, quit, stop)
	ahead := watchSchema(ctx, s, stop, log)
	err = a.runWeb(ctx, s, dsn, tok, jobs, fleet, ln, h, log)
	if e := ahead(); e != nil {
		return exit(ExitUnavailable, "once serve: %v", e)
	}
	return err
}

// serveStops are the signals that stop once serve (exit 0); SIGHUP too (a closed terminal: left
// to Go, it killed it, 129), but a SIGHUP ignored at start (nohup) stays ignored: Notify would
// install a handler for it. SIGQUIT stops it too, after the goroutines' stacks (quitStops).
func serveStops() []os.Signal {
	sigs := []os.Signal{syscall.SIGTERM, syscall.SIGINT}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// quitStops prints the goroutines' stacks at a SIGQUIT on quit, as Go would, then stops as on
// SIGTERM (left to Go, it exited 2), until ctx ends.
func (a *app) quitStops(ctx context.Context, quit <-chan os.Signal, stop func()) {
	select {
	case <-quit:
		dumpGoroutines(a.rawStderr)
		stop()
	case <-ctx.Done():
	}
}

// schemaPoll is how often once serve reads the store's schema version (one round trip).
const schemaPoll = 2 * time.Second

// watchSchema reads the store's schema version every schemaPoll while ctx lasts
// (store.SchemaChecker): the version is otherwise read only when the store is opened. A newer
// once that upgraded the store stops the server (stop), and the returned func gives the error
// its exit (69) says; nil while it did not.
func watchSchema(ctx context.Context, s store.Store, stop func(), log *slog.Logger) func() error {
	var found atomic.Pointer[error]
	sc, ok := s.(store.SchemaChecker)
	if !ok {
		return func() error { return nil }
	}
	go func() {
		t := time.NewTicker(schemaPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := sc.CheckSchema(ctx); errors.Is(err, store.ErrSchemaAhead) {
				found.Store(&err)
				log.Error("the store's schema was upgraded by a newer once: stopping; restart once serve with the newer once", "err", err)
				stop()
				return
			}
		}
	}()
	return func() error {
		if p := found.Load(); p != nil {
			return *p
		}
		return nil
	}
}

// runWeb serves the dashboard, the API and the metrics on ln until ctx ends.
func (a *app) runWeb(ctx context.Context, s store.Store, dsn, tok string, jobs func() []scheduler.Job, fleet metrics.FleetStats, ln net.Listener, h *httpFlags, log *slog.Logger) error {
	col, err := metrics.New(metrics.Config{Store: s, Fleet: fleet})
	if err != nil {
		ln.Close()
		return err
	}
	srv, err := web.New(web.Config{Store: s, DSN: dsn, Token: tok, ReadsNeedToken: h.readsNeedToken, StoreTimeout: h.storeTimeout, Jobs: jobs, Metrics: col.Handler(), Log: log, Version: version()})
	if err != nil {
		ln.Close()
		return err
	}
	scheme := "http"
	if h.certFile != "" {
		scheme = "https"
	}
	log.Info("serving", "url", fmt.Sprintf("%s://%s/", scheme, ln.Addr()), "store", store.Redact(dsn), "changes", tok != "")
	err = srv.Serve(ctx, ln, h.certFile, h.keyFile)
	if errors.Is(err, web.ErrNeedsToken) {
		return usage("%v: give --token-file", err)
	}
	if err != nil {
		return exit(ExitUnavailable, "once serve: %v", err)
	}
	return nil
}
