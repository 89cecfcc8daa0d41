package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// hangStore is a real store that, while hang is set, answers no read: each waits until its
// context ends, as a store client does on a connection to a server stopped with SIGSTOP.
// blocked counts the reads waiting now.
type hangStore struct {
	store.Store
	hang    atomic.Bool
	blocked atomic.Int32
}

func (h *hangStore) wait(ctx context.Context) error {
	h.blocked.Add(1)
	defer h.blocked.Add(-1)
	<-ctx.Done()
	return ctx.Err()
}

func (h *hangStore) Tasks(ctx context.Context, after string, limit int) ([]string, error) {
	if h.hang.Load() {
		return nil, h.wait(ctx)
	}
	return store.ListTasks(ctx, h.Store, after, limit)
}

func (h *hangStore) Leases(ctx context.Context) ([]store.Lease, error) {
	if h.hang.Load() {
		return nil, h.wait(ctx)
	}
	return h.Store.Leases(ctx)
}

func (h *hangStore) History(ctx context.Context, q store.HistoryQuery) ([]store.Entry, error) {
	if h.hang.Load() {
		return nil, h.wait(ctx)
	}
	return h.Store.History(ctx, q)
}

// A store that accepts and never answers is a 503 naming the store within Config.StoreTimeout, for
// more requests at once than the server has places; no read is left waiting; /healthz/store says
// so; and the first request after the store answers again is served.
func TestStoreThatHangsIsAQuick503(t *testing.T) {
	sd := newSeeded(t)
	sd.run("backup", "2026-12-01T00:00:00Z", "host-a", store.Succeeded)
	hs := &hangStore{Store: sd.s}
	srv, err := New(Config{Store: hs, DSN: "postgres://once:sekrit@db/once", StoreTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	if resp, _ := get(t, ts, "/"); resp.StatusCode != 200 {
		t.Fatalf("before the hang: %d", resp.StatusCode)
	}
	hs.hang.Store(true)
	var wg sync.WaitGroup
	for i := range 3 * maxInFlight {
		path := []string{"/", "/api/v1/tasks", "/healthz/store"}[i%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			req, _ := http.NewRequestWithContext(t.Context(), "GET", ts.URL+path, nil)
			c := &http.Client{Timeout: 5 * time.Second}
			resp, err := c.Do(req)
			if err != nil {
				t.Errorf("%s: %v after %s", path, err, time.Since(start))
				return
			}
			resp.Body.Close()
			if took := time.Since(start); resp.StatusCode != 503 || took > 2*time.Second {
				t.Errorf("%s while the store hangs: %d after %s, want 503 within 2s", path, resp.StatusCode, took)
			}
		}()
	}
	wg.Wait()
	// Reads of their own, bounded: a server without the deadline would keep them waiting.
	get := func(t *testing.T, ts *httptest.Server, path string) (*http.Response, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+path, nil)
		return do(t, req, nil)
	}
	for path, want := range map[string]string{"/": "did not answer within 300ms", "/api/v1/tasks": "did not answer within 300ms", "/healthz/store": "store unavailable"} {
		resp, body := get(t, ts, path)
		if resp.StatusCode != 503 || !strings.Contains(body, want) || !strings.Contains(body, "postgres://once:xxxxx@db/once") || strings.Contains(body, "sekrit") {
			t.Errorf("%s while the store hangs: %d %q, want 503 naming the store (redacted) and %q", path, resp.StatusCode, store.Clip(body, 2000), want)
		}
	}
	if resp, body := get(t, ts, "/healthz"); resp.StatusCode != 200 || body != "ok\n" {
		t.Errorf("/healthz while the store hangs: %d %q", resp.StatusCode, body)
	}
	if n := hs.blocked.Load(); n != 0 {
		t.Errorf("%d reads still wait on the store after every request was answered", n)
	}
	hs.hang.Store(false)
	for _, path := range []string{"/", "/api/v1/tasks", "/healthz/store"} {
		// Served as soon as the store answers within the deadline: the first try, unless the
		// machine is so loaded that a page under -race takes over 300 ms (a clean-clone run).
		resp, body := get(t, ts, path)
		for try := 1; resp.StatusCode == 503 && try < 20; try++ {
			time.Sleep(100 * time.Millisecond)
			resp, body = get(t, ts, path)
		}
		if resp.StatusCode != 200 {
			t.Errorf("%s once the store answers again: %d %q", path, resp.StatusCode, store.Clip(body, 2000))
		}
	}
}

// TestChangeCutOffMayHaveBeenMade: a change (POST) cut off by the store deadline says that it may
// have been made, so a person looks before sending it again; a read cut off so does not.
func TestChangeCutOffMayHaveBeenMade(t *testing.T) {
	srv := &Server{}
	srv.c.DSN, srv.c.StoreTimeout = "etcd://db:2379", time.Second
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for method, want := range map[string]bool{"POST": true, "GET": false} {
		r := httptest.NewRequest(method, "/api/v1/tasks/t/pause", nil).WithContext(ctx)
		err := srv.storeErr(r, context.DeadlineExceeded)
		if got := strings.Contains(err.Error(), "the change may have been made"); got != want || statusOf(err) != 503 {
			t.Errorf("%s cut off: %d %q, want 503, saying the change may have been made: %v", method, statusOf(err), err, want)
		}
	}
}
