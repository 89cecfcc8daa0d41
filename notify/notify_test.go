package notify_test

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once/notify"
)

func TestEventRetriedUntilDelivered(t *testing.T) {
	var tries atomic.Int32
	var mu sync.Mutex
	var got []notify.Event
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tries.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var ev notify.Event
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("body: %v", err)
		}
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	}))
	defer srv.Close()
	s := notify.New(notify.Options{Backoff: 10 * time.Millisecond})
	code := 3
	s.Event(srv.URL+"/hook", notify.Event{Event: notify.Failed, Task: "t", Slot: "2026-11-29", ExitCode: &code})
	if n := s.Wait(5 * time.Second); n != 0 {
		t.Fatalf("%d pending", n)
	}
	if tries.Load() != 3 || len(got) != 1 || got[0].Event != "failed" || *got[0].ExitCode != 3 || got[0].Host == "" {
		t.Fatalf("tries %d, got %+v", tries.Load(), got)
	}
}

func TestPermanentErrorNotRetried(t *testing.T) {
	var tries atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tries.Add(1)
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()
	s := notify.New(notify.Options{Backoff: 10 * time.Millisecond})
	s.Event(srv.URL, notify.Event{Event: notify.Review})
	s.Wait(5 * time.Second)
	if tries.Load() != 1 {
		t.Fatalf("%d tries for a 404, want 1", tries.Load())
	}
}

// deadEndpoint accepts connections and never answers.
func deadEndpoint(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://user:secret@" + ln.Addr().String() + "/hook/T0001/B0002/XXXXsecretpath"
}

func TestDeadEndpointBoundedByWait(t *testing.T) {
	u := deadEndpoint(t)
	s := notify.New(notify.Options{})
	s.Event(u, notify.Event{Event: notify.Failed})
	s.Ping(u, notify.PingStart, "r1")
	start := time.Now()
	n := s.Wait(300 * time.Millisecond)
	if d := time.Since(start); d > time.Second || n != 2 {
		t.Fatalf("Wait took %s with %d pending, want ~300ms and 2", d, n)
	}
}

func TestDeadEndpointBudget(t *testing.T) {
	u := deadEndpoint(t)
	var logs strings.Builder
	var mu sync.Mutex
	s := notify.New(notify.Options{Budget: 400 * time.Millisecond, Logger: newLogger(&logs, &mu)})
	s.Event(u, notify.Event{Event: notify.Failed})
	start := time.Now()
	s.Wait(10 * time.Second)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("delivery budget 400ms took %s", d)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "not delivered") || strings.Contains(logs.String(), "secret") || strings.Contains(logs.String(), "T0001") {
		t.Fatalf("log: %s", logs.String())
	}
}

// Webhook paths and ping UUIDs are secrets: logs and errors show scheme and host only.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.slack.com/services/T000/B000/XXXX":          "https://hooks.slack.com/…",
		"https://hc-ping.com/eb095278-f28d-448d-87fb-7b75c171a6aa": "https://hc-ping.com/…",
		"https://u:pw@example.com":                                 "https://example.com/…",
		"http://example.com:8080/":                                 "http://example.com:8080",
		"https://example.com?token=abc":                            "https://example.com/…",
		"hooks.slack.com/services/T000":                            "(hidden URL)",
		"https://u:p#w@example.com/x":                              "(hidden URL)",
		"%zz":                                                      "(hidden URL)",
	} {
		if got := notify.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
	if err := notify.CheckURL("--notify", "ftp://example.com/T000/secret"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("CheckURL: %v", err)
	}
	if _, err := notify.PingURL("hc-ping.com/eb095278", notify.PingStart, ""); err == nil || strings.Contains(err.Error(), "eb095278") {
		t.Errorf("PingURL: %v", err)
	}
}

func TestPingURL(t *testing.T) {
	for _, c := range []struct{ base, kind, want string }{
		{"https://hc-ping.com/abc", notify.PingStart, "https://hc-ping.com/abc/start?rid=r1"},
		{"https://hc-ping.com/abc/", notify.PingSuccess, "https://hc-ping.com/abc?rid=r1"},
		{"https://hc-ping.com/abc", notify.PingFail, "https://hc-ping.com/abc/fail?rid=r1"},
		{"http://h/p?create=1", "3", "http://h/p/3?create=1&rid=r1"},
	} {
		if got, err := notify.PingURL(c.base, c.kind, "r1"); err != nil || got != c.want {
			t.Errorf("PingURL(%q, %q) = %q, %v; want %q", c.base, c.kind, got, err, c.want)
		}
	}
	for _, c := range [][2]string{{"ftp://h/x", "start"}, {"hc-ping.com/x", "start"}, {"https://h/x", "256"}, {"https://h/x", "03"}, {"https://u:pw@h/x", "bogus"}} {
		if _, err := notify.PingURL(c[0], c[1], "r"); err == nil || strings.Contains(err.Error(), "pw@") {
			t.Errorf("PingURL(%q, %q): %v", c[0], c[1], err)
		}
	}
}

func TestPingsDelivered(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
	}))
	defer srv.Close()
	s := notify.New(notify.Options{})
	s.Ping(srv.URL+"/u", notify.PingStart, "r1")
	s.Wait(5 * time.Second)
	s = notify.New(notify.Options{})
	s.Ping(srv.URL+"/u", "2", "r1")
	s.Wait(5 * time.Second)
	if strings.Join(paths, ",") != "GET /u/start?rid=r1,GET /u/2?rid=r1" {
		t.Fatalf("paths %v", paths)
	}
}

// A command that ends at once: its end is pinged after its start has been delivered, however slow
// the monitor is to answer the start (it would otherwise see the end first, and show the check
// running until its grace time).
func TestPingsInOrder(t *testing.T) {
	var mu sync.Mutex
	var handled []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/start") {
			time.Sleep(200 * time.Millisecond)
		}
		mu.Lock()
		handled = append(handled, r.URL.Path)
		mu.Unlock()
	}))
	defer srv.Close()
	s := notify.New(notify.Options{})
	s.Ping(srv.URL+"/u", notify.PingStart, "r1")
	s.Ping(srv.URL+"/u", "4", "r1")
	s.Ping(srv.URL+"/v", notify.PingSuccess, "r2") // another job's: not held up by /u's
	s.Ping(srv.URL+"/u", notify.PingFail, "r1")
	if n := s.Wait(5 * time.Second); n != 0 {
		t.Fatalf("%d pings not delivered", n)
	}
	if got := strings.Join(handled, ","); got != "/v,/u/start,/u/4,/u/fail" {
		t.Fatalf("pings handled in the order %s", got)
	}
}

func FuzzPingURL(f *testing.F) {
	for _, s := range []string{"https://hc-ping.com/abc", "http://u:p@h:1/x/?a=b#f", "https://h/%2F", "ftp://x", ""} {
		f.Add(s, "start", "r1")
		f.Add(s, "7", "")
	}
	f.Fuzz(func(t *testing.T, base, kind, rid string) {
		got, err := notify.PingURL(base, kind, rid)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if !strings.HasPrefix(got, "http://") && !strings.HasPrefix(got, "https://") {
			t.Fatalf("PingURL(%q) = %q", base, got)
		}
	})
}

// A redirect is not followed: a 302 would turn the event's POST into a GET without its body, to
// wherever it points, with the hook's secret URL as the Referer; it is a failed delivery, logged.
func TestRedirectNotFollowed(t *testing.T) {
	var other atomic.Int32
	dst := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { other.Add(1) }))
	defer dst.Close()
	for _, code := range []int{301, 302, 303, 307, 308} {
		src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, dst.URL+"/landing", code)
		}))
		var log strings.Builder
		var mu sync.Mutex
		s := notify.New(notify.Options{Backoff: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return log.Write(p)
		}), nil))})
		s.Event(src.URL+"/T0/SECRET", notify.Event{Event: notify.Failed, Task: "t"})
		s.Wait(5 * time.Second)
		src.Close()
		mu.Lock()
		if !strings.Contains(log.String(), "redirect") || strings.Contains(log.String(), "SECRET") {
			t.Errorf("%d: log %q", code, log.String())
		}
		mu.Unlock()
	}
	if other.Load() != 0 {
		t.Errorf("the redirect's target got %d requests", other.Load())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A URL whose port cannot be dialled is refused when given, not at every delivery.
func TestCheckURLPort(t *testing.T) {
	for raw, ok := range map[string]bool{"https://h/x": true, "https://h:443/x": true, "http://[::1]:8080/": true,
		"https://h:99999/SECRET": false, "https://h:0/x": false, "https://h:/x": true, "https://:80/x": false} {
		if err := notify.CheckURL("--notify", raw); (err == nil) != ok || (err != nil && strings.Contains(err.Error(), "SECRET")) {
			t.Errorf("%s: %v", raw, err)
		}
	}
}
