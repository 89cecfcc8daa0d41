package idemhttp_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/idemhttp"
)

// A client that gives up (its timeout) and retries with the same key: the retry must get the
// operation's outcome, not the answer its handler gave when the first client's leaving ended its
// context.
func TestClientLeavingDoesNotStoreAnAbortedAnswer(t *testing.T) {
	s := newServer(t, idemhttp.Options{PendingTTL: 10 * time.Second}, func(s *server, w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		select {
		case <-r.Context().Done():
			w.WriteHeader(http.StatusServiceUnavailable) // the handler's own transaction rolled back
		case <-time.After(500 * time.Millisecond):
			w.WriteHeader(http.StatusCreated)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/orders", strings.NewReader("{}"))
	req.Header.Set(idemhttp.Header, "pay-1")
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the first request should have timed out")
	}
	// The handler runs on for its 500 ms: until then a retry is told the key is in progress (409).
	again := s.do(t, http.MethodPost, "pay-1", "{}")
	for end := time.Now().Add(20 * time.Second); again.status == http.StatusConflict && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		again = s.do(t, http.MethodPost, "pay-1", "{}")
	}
	if again.status != http.StatusCreated {
		t.Fatalf("retry after the client's timeout: %d (replayed %q), want 201: the operation never happened and every retry with this key gets the aborted answer",
			again.status, again.header.Get(idemhttp.ReplayedHeader))
	}
}
