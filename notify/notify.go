// Package notify tells people and monitors what once did: JSON events posted to a webhook
// (--notify) and Healthchecks.io-style pings (--ping).
//
// Deliveries are asynchronous and bounded: each one is retried a few times with backoff within a
// total budget, and Wait gives pending deliveries a deadline, so a slow or dead endpoint can delay
// once's own exit by at most that deadline and never blocks the job. Delivery is best effort:
// once's exit code and ledger never depend on it.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-run/once/internal/who"
	"github.com/once-run/once/store"
)

// Event kinds posted to a --notify URL.
const (
	Failed    = "failed"     // the command ran and failed
	Unknown   = "unknown"    // an attempt's outcome is unknown (its holder vanished, or it could not be recorded)
	Review    = "review"     // a slot waits for a person (once resolve)
	LeaseLost = "lease_lost" // the lease was lost while the command ran; it is being stopped
	Missed    = "missed"     // a scheduled slot passed while no node ran it, outside its catch-up window
)

// Event is the JSON body posted to a --notify URL.
type Event struct {
	Event    string    `json:"event"` // one of the kinds above
	Task     string    `json:"task"`
	Slot     string    `json:"slot"`
	RunID    string    `json:"run_id,omitempty"`
	Attempt  int       `json:"attempt,omitempty"`
	Holder   string    `json:"holder,omitempty"`
	Token    int64     `json:"token,omitempty"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Resolve  *Resolve  `json:"resolve,omitempty"` // the commands that decide a slot waiting for review
	Host     string    `json:"host"`
	Time     time.Time `json:"time"`
}

// Resolve holds the commands that decide a slot waiting for review: each one complete shell
// line, safe to paste, that records the decision it names.
type Resolve struct {
	Failed    string `json:"failed"`    // once resolve … --as failed: run the slot again
	Succeeded string `json:"succeeded"` // once resolve … --as succeeded: the slot is done
}

// Options tunes a Sender. Zero values take the defaults.
type Options struct {
	// Tries per delivery, the first included; default 3.
	Tries int
	// Budget is the total time one delivery may take, retries and backoff included; default 5s.
	Budget time.Duration
	// Backoff before the second try, doubling after; default 250ms.
	Backoff time.Duration
	// Client makes the requests; default an http.Client without redirects' surprises and with
	// timeouts on every phase.
	Client *http.Client
	// Logger receives one warning per delivery that failed for good (URLs redacted); nil discards.
	Logger *slog.Logger
}

// Sender delivers events and pings in the background. It is safe for concurrent use; call Wait
// before the process exits.
type Sender struct {
	o      Options
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	busy   atomic.Int32 // deliveries in flight

	mu       sync.Mutex
	lastPing map[string]chan struct{} // per ping URL: closed when its latest ping's delivery has ended
}

// New returns a Sender.
func New(o Options) *Sender {
	if o.Tries <= 0 {
		o.Tries = 3
	}
	if o.Budget <= 0 {
		o.Budget = 5 * time.Second
	}
	if o.Backoff <= 0 {
		o.Backoff = 250 * time.Millisecond
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			TLSHandshakeTimeout:   3 * time.Second,
			ResponseHeaderTimeout: 3 * time.Second,
			MaxIdleConns:          4,
			IdleConnTimeout:       10 * time.Second,
		},
			// A redirect is not followed: on a 301, 302 or 303 the POST would go on as a GET
			// without its body (an event lost while the answer says delivered), maybe to another
			// host or over plain http, with the secret URL as its Referer.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Sender{o: o, ctx: ctx, cancel: cancel}
}

// Event posts ev as JSON to rawURL in the background. Host and Time are filled when empty.
func (s *Sender) Event(rawURL string, ev Event) {
	if rawURL == "" {
		return
	}
	if ev.Host == "" {
		ev.Host = who.Host()
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	body, err := json.Marshal(ev)
	if err != nil { // cannot happen for this type
		s.o.Logger.Warn("notification not sent", "event", ev.Event, "err", err)
		return
	}
	s.goDeliver(http.MethodPost, rawURL, body, "event "+ev.Event, nil, nil)
}

// Ping kinds for Sender.Ping.
const (
	PingStart   = "start"
	PingSuccess = "success"
	PingFail    = "fail"
)

// Ping sends a Healthchecks.io-style ping in the background: base/start?rid=RID when the command
// starts, base?rid=RID on success, base/fail?rid=RID on failure, or base/CODE?rid=RID for an
// exit code (kind given as the decimal code). The pings of one base URL go out one after another,
// in the order they were given: a command that ends at once must not be reported ended before it
// is reported started, which a monitor would then show as running until its grace time. Those of
// different URLs (the daemon's jobs) do not wait for each other.
func (s *Sender) Ping(base, kind, rid string) {
	if base == "" {
		return
	}
	u, err := PingURL(base, kind, rid)
	if err != nil {
		s.o.Logger.Warn("ping not sent", "err", err)
		return
	}
	s.mu.Lock()
	if s.lastPing == nil {
		s.lastPing = map[string]chan struct{}{}
	}
	prev, done := s.lastPing[base], make(chan struct{})
	s.lastPing[base] = done
	s.mu.Unlock()
	s.goDeliver(http.MethodGet, u, nil, "ping "+kind, prev, func() {
		s.mu.Lock()
		if s.lastPing[base] == done {
			delete(s.lastPing, base)
		}
		s.mu.Unlock()
		close(done)
	})
}

// PingURL builds the URL of a ping (see Ping). base must be an absolute http or https URL; its
// query is kept. kind is PingStart, PingSuccess, PingFail or an exit code 0–255. Errors are one
// line with the URL redacted.
func PingURL(base, kind, rid string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--ping %s: give an http or https URL such as https://hc-ping.com/UUID", RedactURL(base))
	}
	suffix := ""
	switch kind {
	case PingSuccess:
	case PingStart, PingFail:
		suffix = "/" + kind
	default:
		n, err := strconv.Atoi(kind)
		if err != nil || n < 0 || n > 255 || strconv.Itoa(n) != kind {
			return "", fmt.Errorf("ping kind %q: want start, success, fail or an exit code", kind)
		}
		suffix = "/" + kind
	}
	u.Path = strings.TrimRight(u.Path, "/") + suffix
	u.RawPath = ""
	if rid != "" {
		q := u.Query()
		q.Set("rid", rid)
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// RedactURL is rawURL as logs and errors show it: scheme and host only, then "/…" when there is
// more. The rest is often the secret: a Slack or Teams webhook's path, a ping's UUID, a token in the
// query, a password in the user info. Text that is not a URL with a host shows as "(hidden URL)".
func RedactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || u.Scheme == "" {
		return "(hidden URL)"
	}
	out := u.Scheme + "://" + u.Host
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		out += "/…"
	}
	return out
}

// CheckURL validates a --notify or --ping URL: absolute http or https, with a port (when given)
// that can be dialled.
func CheckURL(flag, raw string) error {
	if !validURL(raw) {
		return fmt.Errorf("%s %s: give an http or https URL", flag, RedactURL(raw))
	}
	return nil
}

// validURL reports whether raw is an absolute http or https URL whose port, when it has one, is
// 1–65535 (url.Parse takes :99999, which every delivery then fails to dial).
func validURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return false
	}
	return u.Port() == "" || store.IsPort(u.Port())
}

// goDeliver delivers in the background; when after is given, once it is closed, and when done is
// given, it calls it at the end. A delivery waited for ends: it has a budget, and Wait's deadline
// cancels it.
func (s *Sender) goDeliver(method, rawURL string, body []byte, what string, after <-chan struct{}, done func()) {
	s.wg.Add(1)
	s.busy.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.busy.Add(-1)
		if done != nil {
			defer done()
		}
		if after != nil {
			<-after
		}
		if err := s.deliver(s.ctx, method, rawURL, body); err != nil {
			s.o.Logger.Warn("notification not delivered", "what", what, "err", err)
		}
	}()
}

// errPermanent marks a response that retrying will not fix (4xx other than 408 and 429).
var errPermanent = errors.New("permanent")

// deliver makes up to Tries requests within Budget.
func (s *Sender) deliver(ctx context.Context, method, rawURL string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.o.Budget)
	defer cancel()
	backoff := s.o.Backoff
	var last error
	for try := 1; ; try++ {
		last = s.once(ctx, method, rawURL, body)
		if last == nil {
			return nil
		}
		if errors.Is(last, errPermanent) || try >= s.o.Tries {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s: gave up after %d tries: %v", method, RedactURL(rawURL), try, last)
		case <-time.After(backoff):
		}
		backoff *= 2
	}
	return fmt.Errorf("%s %s: %v", method, RedactURL(rawURL), last)
}

func (s *Sender) once(ctx context.Context, method, rawURL string, body []byte) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, rd)
	if err != nil {
		return fmt.Errorf("%w: bad URL", errPermanent)
	}
	req.Header.Set("User-Agent", "once")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.o.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL, password included
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fmt.Errorf("%w: HTTP %d, a redirect, not followed: give the URL it points to", errPermanent, resp.StatusCode)
	case resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500:
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return fmt.Errorf("%w: HTTP %d", errPermanent, resp.StatusCode)
}

// Wait waits for pending deliveries, at most max; then it cancels those still pending and returns
// how many it cancelled. Call it last: deliveries started after Wait fail at once.
func (s *Sender) Wait(max time.Duration) int {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-done:
		s.cancel()
		return 0
	case <-t.C:
	}
	n := int(s.busy.Load())
	s.cancel()
	<-done // cancelled requests return promptly
	return n
}
