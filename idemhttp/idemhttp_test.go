package idemhttp_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once/idemhttp"
	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/sqlite"
)

type server struct {
	*httptest.Server
	calls   atomic.Int32
	release chan struct{} // when set, the handler waits for it
	keys    store.Keys
}

func newServer(t *testing.T, o idemhttp.Options, h func(s *server, w http.ResponseWriter, r *http.Request)) *server {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "once.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := &server{keys: st.(store.Keys)}
	o.Store = s.keys
	mw, err := idemhttp.Middleware(o)
	if err != nil {
		t.Fatal(err)
	}
	if h == nil {
		h = func(s *server, w http.ResponseWriter, r *http.Request) {
			n := s.calls.Add(1)
			if s.release != nil {
				<-s.release
			}
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Location", "/orders/1")
			w.Header().Set("X-Not-Kept", "1")
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(map[string]any{"call": n, "body": string(body)})
		}
	}
	s.Server = httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(s, w, r) })))
	t.Cleanup(s.Close)
	return s
}

type resp struct {
	status int
	header http.Header
	body   string
}

func (s *server) do(t *testing.T, method, key, body string) resp {
	t.Helper()
	req, _ := http.NewRequest(method, s.URL+"/orders", strings.NewReader(body))
	if key != "" {
		req.Header.Set(idemhttp.Header, key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, string(b)}
}

func wantProblem(t *testing.T, r resp, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(r.body), &p); err != nil || p["status"] != float64(status) || p["type"] == "" || p["title"] == "" {
		t.Fatalf("problem body %q: want type, title and status %d", r.body, status)
	}
}

func TestFirstExecutesRetryReplays(t *testing.T) {
	s := newServer(t, idemhttp.Options{}, nil)
	first := s.do(t, "POST", `"order-1"`, `{"amount":5}`)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	again := s.do(t, "POST", `"order-1"`, `{"amount":5}`)
	if again.status != first.status || again.body != first.body || again.header.Get("Location") != "/orders/1" ||
		again.header.Get("Content-Type") != "application/json" || again.header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %v %q; want the first response again", again.status, again.header, again.body)
	}
	if again.header.Get("X-Not-Kept") != "" {
		t.Fatal("a header outside KeepHeaders was replayed")
	}
	if bare := s.do(t, "POST", `order-1`, `{"amount":5}`); bare.body != first.body {
		t.Fatalf("bare (unquoted) key: %d %q, want the replay", bare.status, bare.body)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if r := s.do(t, "GET", `"order-1"`, ""); r.status != http.StatusCreated || s.calls.Load() != 2 {
		t.Fatalf("GET is not guarded: %d, calls %d", r.status, s.calls.Load())
	}
}

func TestStoredErrorIsReplayed(t *testing.T) {
	var n atomic.Int32
	s := newServer(t, idemhttp.Options{}, func(_ *server, w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		http.Error(w, "downstream refused", http.StatusInternalServerError)
	})
	a, b := s.do(t, "POST", `"k"`, "x"), s.do(t, "POST", `"k"`, "x")
	if a.status != 500 || b.status != 500 || a.body != b.body || n.Load() != 1 {
		t.Fatalf("500 replay: %d/%d, %d calls", a.status, b.status, n.Load())
	}
}

func TestPayloadMismatch422(t *testing.T) {
	s := newServer(t, idemhttp.Options{}, nil)
	s.do(t, "POST", `"k"`, "one")
	wantProblem(t, s.do(t, "POST", `"k"`, "two"), http.StatusUnprocessableEntity)
	wantProblem(t, s.do(t, "PATCH", `"k"`, "one"), http.StatusUnprocessableEntity)
	if s.calls.Load() != 1 {
		t.Fatalf("%d calls", s.calls.Load())
	}
}

func TestMissingAndBadKey400(t *testing.T) {
	req := newServer(t, idemhttp.Options{Required: true}, nil)
	wantProblem(t, req.do(t, "POST", "", "x"), http.StatusBadRequest)
	wantProblem(t, req.do(t, "POST", `"unterminated`, "x"), http.StatusBadRequest)
	wantProblem(t, req.do(t, "POST", `"a" ; p=1`, "x"), http.StatusBadRequest)
	r, _ := http.NewRequest("POST", req.URL, strings.NewReader("x"))
	r.Header.Add(idemhttp.Header, `"a"`)
	r.Header.Add(idemhttp.Header, `"b"`)
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 400 {
		t.Fatalf("two keys: %d, want 400", res.StatusCode)
	}
	if req.calls.Load() != 0 {
		t.Fatal("a request with a bad or missing key reached the handler")
	}
	opt := newServer(t, idemhttp.Options{}, nil)
	if r := opt.do(t, "POST", "", "x"); r.status != http.StatusCreated {
		t.Fatalf("key not required: %d, want pass-through", r.status)
	}
}

func TestTooLarge413(t *testing.T) {
	s := newServer(t, idemhttp.Options{MaxBody: 10}, nil)
	wantProblem(t, s.do(t, "POST", `"k"`, strings.Repeat("x", 11)), http.StatusRequestEntityTooLarge)
}

// TestConcurrentDuplicates409: N duplicates while the first executes: exactly one handler run, the
// others 409; afterwards every retry gets the replay.
func TestConcurrentDuplicates409(t *testing.T) {
	s := newServer(t, idemhttp.Options{}, nil)
	s.release = make(chan struct{})
	const n = 16
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { statuses <- s.do(t, "POST", `"dup"`, "same").status })
	}
	deadline := time.Now().Add(10 * time.Second)
	conflicts := 0
	for conflicts < n-1 && time.Now().Before(deadline) {
		select {
		case st := <-statuses:
			if st != http.StatusConflict {
				t.Fatalf("a duplicate while the first executes got %d, want 409", st)
			}
			conflicts++
		case <-time.After(10 * time.Second):
		}
	}
	close(s.release)
	wg.Wait()
	close(statuses)
	if st := <-statuses; st != http.StatusCreated {
		t.Fatalf("the executing request got %d", st)
	}
	if s.calls.Load() != 1 {
		t.Fatalf("handler ran %d times for %d concurrent duplicates, want 1", s.calls.Load(), n)
	}
	if r := s.do(t, "POST", `"dup"`, "same"); r.status != http.StatusCreated || r.header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("after completion: %d, want the replay", r.status)
	}
}

// TestExpiredPendingExecutesAgain: a request whose handler died without a response (its pending
// claim expired) is executed by the next retry.
func TestExpiredPendingExecutesAgain(t *testing.T) {
	s := newServer(t, idemhttp.Options{PendingTTL: time.Minute}, nil)
	dead := store.Claimant{RunID: "crashed", Expires: time.Millisecond}
	fp := idemhttp.DefaultFingerprint(httptest.NewRequest("POST", "/orders", nil), []byte("x"))
	if _, err := s.keys.Claim(context.Background(), store.ClaimRequest{Scope: "http", Keys: []string{"k"}, Fingerprints: []string{fp}, Pending: true, Claimant: dead}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if r := s.do(t, "POST", `"k"`, "x"); r.status != http.StatusCreated || s.calls.Load() != 1 {
		t.Fatalf("retry after the pending TTL: %d, %d calls", r.status, s.calls.Load())
	}
}

func TestPanicReleasesClaim(t *testing.T) {
	var n atomic.Int32
	s := newServer(t, idemhttp.Options{}, func(_ *server, w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) == 1 {
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	req, _ := http.NewRequest("POST", s.URL, strings.NewReader("x"))
	req.Header.Set(idemhttp.Header, `"k"`)
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
	}
	if r := s.do(t, "POST", `"k"`, "x"); r.status != http.StatusNoContent || n.Load() != 2 {
		t.Fatalf("retry after a panic: %d, %d calls; want the handler run again", r.status, n.Load())
	}
}

func TestTransportSetsKey(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = append(got, r.Header.Get(idemhttp.Header)) }))
	defer srv.Close()
	t.Setenv("ONCE_EFFECT_KEY", `inv "7"`)
	c := &http.Client{Transport: &idemhttp.Transport{}}
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if req.Header.Get(idemhttp.Header) != "" {
		t.Fatal("Transport modified the caller's request")
	}
	res, _ = c.Get(srv.URL)
	res.Body.Close()
	if len(got) != 2 || got[0] != `"inv \"7\""` || got[1] != "" {
		t.Fatalf("headers sent: %q; want the sf-string on POST only", got)
	}
	if k, err := idemhttp.ParseKey(got[0]); err != nil || k != `inv "7"` {
		t.Fatalf("ParseKey(%q) = %q, %v", got[0], k, err)
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `abc`, `"a\"b\\c"`, `"unterminated`, `"a"x`, `""`, ` "x" `, "\"\x00\"", `"\q"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := idemhttp.ParseKey(v)
		if err != nil {
			return
		}
		if k == "" || len(k) > 255 {
			t.Fatalf("ParseKey(%q) = %q: bad length", v, k)
		}
		enc, err := idemhttp.FormatKey(k)
		if err != nil {
			t.Fatalf("FormatKey(%q) after ParseKey(%q): %v", k, v, err)
		}
		if k2, err := idemhttp.ParseKey(enc); err != nil || k2 != k {
			t.Fatalf("round trip %q → %q → %q, %v", k, enc, k2, err)
		}
	})
}

// The query string is part of the payload: the same key on POST /orders?amount=1000 after
// POST /orders?amount=10 is another operation (422), not a replay of the first one's 201.
func TestQueryIsPartOfFingerprint(t *testing.T) {
	s := newServer(t, idemhttp.Options{}, nil)
	post := func(query string) int {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/orders"+query, strings.NewReader("{}"))
		req.Header.Set(idemhttp.Header, "q-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := post("?amount=10"); got != http.StatusCreated {
		t.Fatalf("first: %d", got)
	}
	if got := post("?amount=10"); got != http.StatusCreated {
		t.Fatalf("retry with the same query: %d, want the replayed 201", got)
	}
	if got := post("?amount=1000"); got != http.StatusUnprocessableEntity {
		t.Fatalf("same key, another query: %d, want 422", got)
	}
	if got := post(""); got != http.StatusUnprocessableEntity {
		t.Fatalf("same key, no query: %d, want 422", got)
	}
	if s.calls.Load() != 1 {
		t.Fatalf("%d executions, want 1", s.calls.Load())
	}
}

// A key an older once stored for a request with a query (its fingerprint did not hash the query):
// a retry of that request after the upgrade gets its replay, not a 422 whose advice (a new key)
// would execute the operation again.
func TestKeyStoredBeforeTheQueryWasHashed(t *testing.T) {
	s := newServer(t, idemhttp.Options{}, nil)
	ctx := context.Background()
	sum := sha256.Sum256([]byte("POST\n/orders\n{}"))
	old := hex.EncodeToString(sum[:])
	c := store.Claimant{RunID: "older-once"}
	if _, err := s.keys.Claim(ctx, store.ClaimRequest{Scope: "http", Keys: []string{"pre-1"}, Fingerprints: []string{old}, Pending: true, Claimant: c}); err != nil {
		t.Fatal(err)
	}
	if err := s.keys.Complete(ctx, "http", []string{"pre-1"}, "older-once", []byte(`{"status":201,"body":"b2s="}`)); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/orders?amount=10", strings.NewReader("{}"))
	req.Header.Set(idemhttp.Header, "pre-1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated || string(body) != "ok" || res.Header.Get(idemhttp.ReplayedHeader) != "true" || s.calls.Load() != 0 {
		t.Fatalf("retry of a request stored before the upgrade: %d %q %v, %d executions; want the replayed 201", res.StatusCode, body, res.Header, s.calls.Load())
	}
	req, _ = http.NewRequest(http.MethodPost, s.URL+"/orders?amount=10", strings.NewReader(`{"other":1}`))
	req.Header.Set(idemhttp.Header, "pre-1")
	if res, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("another body under the old key: %d, want 422", res.StatusCode)
	}
}

// An informational status (103 Early Hints) is not the response's status: the final one is
// stored, sent and replayed (the 103 was kept, and the client got 200 for a 201).
func TestInformationalStatusIsNotStored(t *testing.T) {
	s := newServer(t, idemhttp.Options{}, func(s *server, w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Location", "/orders/7")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("made"))
	})
	for i, want := range []string{"", "true"} {
		r := s.do(t, http.MethodPost, "eh-1", "{}")
		if r.status != http.StatusCreated || r.body != "made" || r.header.Get("Location") != "/orders/7" || r.header.Get(idemhttp.ReplayedHeader) != want {
			t.Fatalf("request %d: %d %q %v; want 201 made with its Location", i+1, r.status, r.body, r.header)
		}
	}
}

// A response too large to store (store.MaxKeyResult: etcd and ZooKeeper refuse about 1 MB) still
// completes the key, without its body: it was left pending, and a retry after the pending TTL
// executed the request again.
func TestLargeResponseCompletesWithoutBody(t *testing.T) {
	big := strings.Repeat("x", store.MaxKeyResult+1)
	s := newServer(t, idemhttp.Options{PendingTTL: 200 * time.Millisecond}, func(s *server, w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		w.Header().Set("Location", "/exports/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(big))
	})
	if r := s.do(t, http.MethodPost, "big-1", "{}"); r.status != http.StatusCreated || r.body != big {
		t.Fatalf("first: %d, %d bytes", r.status, len(r.body))
	}
	time.Sleep(300 * time.Millisecond)
	r := s.do(t, http.MethodPost, "big-1", "{}")
	if r.status != http.StatusCreated || r.body != "" || r.header.Get("Location") != "/exports/1" ||
		r.header.Get(idemhttp.ReplayedHeader) != "true" || r.header.Get(idemhttp.OmittedHeader) != strconv.Itoa(len(big)) {
		t.Fatalf("retry: %d, %d bytes, %v; want the 201 replayed without its body", r.status, len(r.body), r.header)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// PendingTTL bounds how long a request executes: the handler's context ends when its claim may
// expire. A handler that ran on past it was executed a second time, concurrently, by a retry.
func TestHandlerContextEndsAtPendingTTL(t *testing.T) {
	s := newServer(t, idemhttp.Options{PendingTTL: 300 * time.Millisecond}, func(s *server, w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		select {
		case <-r.Context().Done():
			w.WriteHeader(http.StatusServiceUnavailable) // the handler's own transaction rolled back
		case <-time.After(900 * time.Millisecond):
			w.WriteHeader(http.StatusCreated)
		}
	})
	first := make(chan resp, 1)
	go func() { first <- s.do(t, http.MethodPost, "slow-1", "{}") }()
	time.Sleep(600 * time.Millisecond) // past the first claim's TTL, the first handler not done
	// The first answer is awaited before the retry: on a loaded machine the first claim may be
	// written late, and a retry before its TTL is a 409, not what is tested here.
	if r := <-first; r.status != http.StatusServiceUnavailable {
		t.Fatalf("first: %d, want its handler stopped at the TTL (503)", r.status)
	}
	second := s.do(t, http.MethodPost, "slow-1", "{}")
	if second.status != http.StatusServiceUnavailable || second.header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("retry past the TTL: %d %v, want the first response replayed", second.status, second.header)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// A key a person marked done (once keys claim --reclaim-unknown, after checking the operation
// happened) has no response to replay: the answer says the operation is done and must not be
// repeated; it said "use a new key", which repeats it.
func TestDoneWithoutResponseIsNotToBeRepeated(t *testing.T) {
	s := newServer(t, idemhttp.Options{}, nil)
	ctx := context.Background()
	c := store.Claimant{RunID: "crashed", Expires: time.Millisecond}
	fp := idemhttp.DefaultFingerprint(httptest.NewRequest("POST", "/orders", nil), []byte("x"))
	if _, err := s.keys.Claim(ctx, store.ClaimRequest{Scope: "http", Keys: []string{"k"}, Fingerprints: []string{fp}, Pending: true, Claimant: c}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if ch, err := s.keys.Reclaim(ctx, "http", []string{"k"}, nil, true); err != nil || len(ch) != 1 {
		t.Fatalf("mark done: %v %v", ch, err)
	}
	r := s.do(t, "POST", "k", "x")
	if s.calls.Load() != 0 || strings.Contains(r.body, "use a new key") || !strings.Contains(r.body, "done") {
		t.Fatalf("%d calls, %d %s; want no call and an answer that the operation is done", s.calls.Load(), r.status, r.body)
	}
}

// A body too large to store is omitted from the replay: headers describing that body (its length,
// its encoding) are not replayed with the empty one, or the client cannot read the response.
func TestOmittedBodyDropsItsHeaders(t *testing.T) {
	big := strings.Repeat("x", store.MaxKeyResult+1)
	keep := []string{"Content-Type", "Content-Length", "Content-Encoding", "Location"}
	s := newServer(t, idemhttp.Options{KeepHeaders: keep}, func(s *server, w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		w.Header().Set("Content-Encoding", "identity")
		w.Header().Set("Location", "/exports/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(big))
	})
	if r := s.do(t, http.MethodPost, "big-cl", "{}"); r.status != http.StatusCreated || r.body != big {
		t.Fatalf("first: %d, %d bytes", r.status, len(r.body))
	}
	time.Sleep(10 * time.Millisecond)
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/orders", strings.NewReader("{}"))
	req.Header.Set(idemhttp.Header, "big-cl")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	defer res.Body.Close()
	b := make([]byte, 10)
	n, rerr := res.Body.Read(b)
	if res.ContentLength > 0 || res.Header.Get("Content-Encoding") != "" || res.Header.Get(idemhttp.OmittedHeader) == "" || res.Header.Get("Location") != "/exports/1" {
		t.Fatalf("replay: Content-Length %d, headers %v, read %d %v; want no body headers, the omission said", res.ContentLength, res.Header, n, rerr)
	}
}

// A rolling upgrade: an older instance (its fingerprint without the query) and an upgraded one
// serve one store. A request with a query executed by the upgraded instance under
// DefaultFingerprint, retried at the older one, is answered 422, whose advice (a new key) executes
// the operation again; under QuerylessFingerprint the older instance replays it, and so does the
// upgraded instance once it is back on DefaultFingerprint.
func TestRollingUpgradeQuerylessFingerprint(t *testing.T) {
	serve, calls := instances(t)
	older := serve(func(r *http.Request, body []byte) string { // an older once's DefaultFingerprint
		sum := sha256.Sum256([]byte(r.Method + "\n" + r.URL.EscapedPath() + "\n" + string(body)))
		return hex.EncodeToString(sum[:])
	})
	post := func(url, key string) int { return payWithQuery(t, url, key) }
	if got := post(serve(nil), "k1"); got != http.StatusCreated {
		t.Fatalf("first, at an upgraded instance: %d", got)
	}
	if got := post(older, "k1"); got != http.StatusUnprocessableEntity {
		t.Fatalf("retry at an older instance, DefaultFingerprint: %d; the older once's 422 is what QuerylessFingerprint avoids", got)
	}
	upgrading := serve(idemhttp.QuerylessFingerprint)
	if got := post(upgrading, "k2"); got != http.StatusCreated {
		t.Fatalf("first, at an instance on QuerylessFingerprint: %d", got)
	}
	for name, url := range map[string]string{"an older instance": older, "an upgraded one on DefaultFingerprint": serve(nil)} {
		if got := post(url, "k2"); got != http.StatusCreated {
			t.Fatalf("retry at %s: %d, want the replayed 201", name, got)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d executions, want 2 (k1 and k2 once each)", n)
	}
}

// instances gives servers of the middleware on one store, each with its own Fingerprint (an instance
// of an older or an upgraded once), and the count of executions across them.
func instances(t *testing.T) (serve func(fp func(*http.Request, []byte) string) string, calls *atomic.Int32) {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "once.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	calls = new(atomic.Int32)
	serve = func(fp func(*http.Request, []byte) string) string {
		mw, err := idemhttp.Middleware(idemhttp.Options{Store: st.(store.Keys), Fingerprint: fp})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.WriteHeader(http.StatusCreated)
		})))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	return serve, calls
}

// payWithQuery posts /pay?amount=10 with key to url and returns the status.
func payWithQuery(t *testing.T, url, key string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/pay?amount=10", strings.NewReader("{}"))
	req.Header.Set(idemhttp.Header, key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// After the rollout, Fingerprint set to DefaultFingerprint by name (rather than left nil) still
// matches the keys stored under QuerylessFingerprint: a retry of one is replayed, not 422.
func TestRollingUpgradeExplicitDefaultFingerprint(t *testing.T) {
	serve, calls := instances(t)
	post := func(url string) int { return payWithQuery(t, url, "k1") }
	if got := post(serve(idemhttp.QuerylessFingerprint)); got != http.StatusCreated {
		t.Fatalf("first, during the rollout: %d", got)
	}
	if got := post(serve(idemhttp.DefaultFingerprint)); got != http.StatusCreated || calls.Load() != 1 {
		t.Fatalf("retry after the rollout, Fingerprint: DefaultFingerprint: %d, %d executions; want the replayed 201, 1", got, calls.Load())
	}
}
