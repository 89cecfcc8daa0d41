package idemhttp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/once-run/once/store"
)

// Options configure Middleware. Only Store is required.
type Options struct {
	Store store.Keys
	// Scope is the key scope (default "http"). ScopeFunc, when set, returns it per request, e.g.
	// "http/" + the authenticated client, so two clients' keys never meet (the draft's composite key).
	Scope     string
	ScopeFunc func(*http.Request) string
	// Required answers 400 to a request of Methods without a key; otherwise such requests pass
	// through unguarded.
	Required bool
	// Methods are the guarded methods (default POST and PATCH); others pass through.
	Methods []string
	// PendingTTL bounds how long a request may execute (default 1 minute): the handler's request
	// context ends a tenth of it (at most 5 s) before its claim on the key may be taken over. A request whose handler
	// died (crash, panic, timeout) without storing a response is executed again by a retry after it.
	PendingTTL time.Duration
	// MaxBody is the largest request body read for the fingerprint (default 1 MiB); larger → 413.
	MaxBody int64
	// Fingerprint of the payload (default: hex SHA-256 of method, path with query, and body).
	// QuerylessFingerprint while instances of an older once serve the same store (a rolling upgrade).
	Fingerprint func(r *http.Request, body []byte) string
	// KeepHeaders are the response headers stored and replayed (default Content-Type,
	// Content-Location, Location, ETag, Last-Modified, Cache-Control).
	KeepHeaders []string
	// ErrorLog receives store errors that happen after the handler ran (default: none).
	ErrorLog func(error)

	queryless bool // Fingerprint is DefaultFingerprint (nil or by name): a key an older once stored for a request with a query has QuerylessFingerprint
}

// ReplayedHeader is set to "true" on a replayed response.
const ReplayedHeader = "Idempotent-Replayed"

// OmittedHeader is set on a replayed response whose body was too large to store
// (store.MaxKeyResult): its value is the length of the body the first response had.
const OmittedHeader = "Idempotent-Body-Omitted"

// stored is the response kept as the key's result.
type stored struct {
	Status int                 `json:"status"`
	Header map[string][]string `json:"header,omitempty"`
	Body   []byte              `json:"body,omitempty"`
	// Omitted is the length of a body too large to store; Body is then empty.
	Omitted int `json:"omitted,omitempty"`
}

// encode returns s as the key's result. A response too large for every store to keep
// (store.MaxKeyResult) is kept without its body: the key must become done all the same, or it
// stays pending and a retry executes the request again once the pending TTL has passed.
func (s stored) encode() []byte {
	res, _ := json.Marshal(s) // plain types always encode
	if len(res) > store.MaxKeyResult {
		s.Omitted, s.Body = len(s.Body), nil
		s.Header = withoutBodyHeaders(s.Header)
		res, _ = json.Marshal(s)
	}
	return res
}

// bodyHeaders describe the bytes of a body: replayed with the body omitted, they would announce
// bytes that never come (a Content-Length over an empty body is an unexpected EOF for the client).
var bodyHeaders = []string{"Content-Length", "Content-Encoding", "Content-Range", "Content-Md5", "Digest", "Content-Digest", "Repr-Digest"}

// withoutBodyHeaders returns a copy of h without bodyHeaders.
func withoutBodyHeaders(h map[string][]string) map[string][]string {
	out := make(map[string][]string, len(h))
	for k, v := range h {
		if !slices.Contains(bodyHeaders, http.CanonicalHeaderKey(k)) {
			out[k] = v
		}
	}
	return out
}

// Middleware returns a net/http middleware that executes each keyed request once (see the package
// documentation). Handlers behind it must not stream: the response is buffered, stored, then sent.
func Middleware(o Options) (func(http.Handler) http.Handler, error) {
	if o.Store == nil {
		return nil, errors.New("idemhttp: Options.Store is nil")
	}
	if o.Scope == "" {
		o.Scope = "http"
	}
	if o.Methods == nil {
		o.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if o.PendingTTL <= 0 {
		o.PendingTTL = time.Minute
	}
	if o.MaxBody <= 0 {
		o.MaxBody = 1 << 20
	}
	if o.Fingerprint == nil {
		o.Fingerprint = DefaultFingerprint
	}
	// DefaultFingerprint given by name, as after a rollout on QuerylessFingerprint, is the default
	// still: the keys stored meanwhile have the queryless fingerprint.
	o.queryless = reflect.ValueOf(o.Fingerprint).Pointer() == reflect.ValueOf(DefaultFingerprint).Pointer()
	if o.KeepHeaders == nil {
		o.KeepHeaders = []string{"Content-Type", "Content-Location", "Location", "ETag", "Last-Modified", "Cache-Control"}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !slices.Contains(o.Methods, r.Method) {
				next.ServeHTTP(w, r)
				return
			}
			serve(&o, next, w, r)
		})
	}, nil
}

// DefaultFingerprint is the hex SHA-256 of the method, the path with its query string, and the
// body. The query is part of the operation (POST /pay?amount=10 and ?amount=1000 are two); a request
// without one hashes as it did before the query was included.
func DefaultFingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	target := r.URL.EscapedPath()
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		target += "?" + r.URL.RawQuery
	}
	fmt.Fprintf(h, "%s\n%s\n", r.Method, target)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

func serve(o *Options, next http.Handler, w http.ResponseWriter, r *http.Request) {
	vals := r.Header.Values(Header)
	if len(vals) == 0 {
		if o.Required {
			problem(w, http.StatusBadRequest, "missing-key", "Idempotency-Key is missing",
				"this endpoint requires an Idempotency-Key header; send a unique key per operation and reuse it on retries")
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	key, body, ok := admit(o, w, r, vals)
	if !ok {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	scope := o.Scope
	if o.ScopeFunc != nil {
		scope = o.ScopeFunc(r)
	}
	fp, old := o.Fingerprint(r, body), ""
	if o.queryless && (r.URL.RawQuery != "" || r.URL.ForceQuery) {
		old = QuerylessFingerprint(r, body)
	}
	claim(o, next, w, r, scope, key, fp, old)
}

// QuerylessFingerprint is DefaultFingerprint as an older once computed it, before the query was
// hashed: the hex SHA-256 of the method, the path without its query, and the body. Give it as
// Options.Fingerprint while instances of an older once serve the same store (a rolling upgrade):
// an older instance compares a stored key's fingerprint with this one only, so a retry it gets of a
// request with a query that an upgraded instance executed under DefaultFingerprint is answered 422,
// whose advice, a new key, executes the operation again. Once every instance is upgraded, drop it:
// the keys it stored are still matched (DefaultFingerprint falls back to it).
//
// A key stored before the upgrade, for a request with a query, has this fingerprint: a retry of that
// request after the upgrade is the same operation, already executed, and gets its replay.
func QuerylessFingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", r.Method, r.URL.EscapedPath())
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// admit checks the request's one Idempotency-Key and reads its body (bounded by o.MaxBody); on a
// problem it answers it and returns false.
func admit(o *Options, w http.ResponseWriter, r *http.Request, vals []string) (string, []byte, bool) {
	if len(vals) > 1 {
		problem(w, http.StatusBadRequest, "bad-key", "more than one Idempotency-Key", "send exactly one Idempotency-Key header")
		return "", nil, false
	}
	key, err := ParseKey(vals[0])
	if err != nil {
		problem(w, http.StatusBadRequest, "bad-key", "malformed Idempotency-Key", err.Error())
		return "", nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, o.MaxBody+1))
	if err != nil {
		problem(w, http.StatusBadRequest, "bad-body", "request body could not be read", err.Error())
		return "", nil, false
	}
	if int64(len(body)) > o.MaxBody {
		problem(w, http.StatusRequestEntityTooLarge, "too-large", "request body too large for an idempotent request",
			fmt.Sprintf("the body is over %d bytes", o.MaxBody))
		return "", nil, false
	}
	return key, body, true
}

// claim claims key for this request and runs next once it holds it; a key already done replays its
// response, one in progress is a conflict, one left unknown by a dead handler is taken over.
// old, when not empty, is the fingerprint an older once gave the request (QuerylessFingerprint): a key
// stored with it is this request's.
func claim(o *Options, next http.Handler, w http.ResponseWriter, r *http.Request, scope, key, fp, old string) {
	c := store.Claimant{RunID: newID(), Expires: o.PendingTTL}
	ctx := r.Context()
	for range 3 { // rounds lost to a concurrent reclaim or forget
		// The claim expires PendingTTL after the store writes it, so after this instant.
		deadline := time.Now().Add(o.PendingTTL)
		got, err := o.Store.Claim(ctx, store.ClaimRequest{Scope: scope, Keys: []string{key}, Fingerprints: []string{fp}, Pending: true, Claimant: c})
		if errors.Is(err, store.ErrFingerprint) && old != "" {
			fp, old = old, ""
			got, err = o.Store.Claim(ctx, store.ClaimRequest{Scope: scope, Keys: []string{key}, Fingerprints: []string{fp}, Pending: true, Claimant: c})
		}
		if errors.Is(err, store.ErrFingerprint) {
			problem(w, http.StatusUnprocessableEntity, "key-reused", "Idempotency-Key reused with another payload",
				"this key was first used with a different method, path, query or body; use a new key for a new operation")
			return
		}
		if err != nil {
			unavailable(w, err)
			return
		}
		if got[0] {
			execute(o, next, w, r, scope, key, c, deadline)
			return
		}
		ks, err := o.Store.Lookup(ctx, scope, []string{key})
		if err != nil {
			unavailable(w, err)
			return
		}
		if len(ks) == 0 {
			continue
		}
		switch ks[0].State {
		case store.KeyDone:
			replay(w, ks[0].Result)
			return
		case store.KeyPending:
			problem(w, http.StatusConflict, "in-progress", "a request with this Idempotency-Key is in progress",
				"the first request with this key has not finished; retry later to get its response")
			return
		}
		// Unknown: the first request's handler died without a response. Take it over.
		deadline = time.Now().Add(o.PendingTTL)
		ch, err := o.Store.Reclaim(ctx, scope, []string{key}, &c, false)
		if err != nil {
			unavailable(w, err)
			return
		}
		if len(ch) == 1 {
			execute(o, next, w, r, scope, key, c, deadline)
			return
		}
	}
	problem(w, http.StatusConflict, "in-progress", "a request with this Idempotency-Key is in progress", "retry later")
}

// execute runs the handler into a buffer, stores the response as the key's result, and sends it.
// A panic releases the claim and propagates. The handler's context ends at deadline, when the
// claim may have expired and a retry may take the key over and execute the request again.
func execute(o *Options, next http.Handler, w http.ResponseWriter, r *http.Request, scope, key string, c store.Claimant, deadline time.Time) {
	rec := &recorder{header: http.Header{}}
	done := false
	defer func() {
		if done {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		defer cancel()
		_ = o.Store.ReleaseKeys(ctx, scope, []string{key}, c.RunID)
	}()
	// Ended a little before the claim's expiry: the store's clock decides that, and the response
	// must still be stored before a retry may take the key over. Not when the client leaves: a
	// client that timed out retries with the same key, and must get the operation's outcome, not
	// the answer of a handler its leaving stopped (stored, it would be replayed to every retry).
	hctx, hcancel := context.WithDeadline(context.WithoutCancel(r.Context()), deadline.Add(-min(o.PendingTTL/10, 5*time.Second)))
	defer hcancel()
	next.ServeHTTP(rec, r.WithContext(hctx))
	hcancel()
	done = true
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	s := stored{Status: rec.status, Header: map[string][]string{}, Body: rec.body.Bytes()}
	for _, h := range o.KeepHeaders {
		if v := rec.header.Values(h); len(v) > 0 {
			s.Header[http.CanonicalHeaderKey(h)] = v
		}
	}
	res := s.encode()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
	defer cancel()
	if err := o.Store.Complete(ctx, scope, []string{key}, c.RunID, res); err != nil && o.ErrorLog != nil {
		o.ErrorLog(fmt.Errorf("idemhttp: response for key %q in scope %q not stored (a retry after the pending TTL executes again): %w", key, scope, err))
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(s.Body)
}

func replay(w http.ResponseWriter, result []byte) {
	var s stored
	if err := json.Unmarshal(result, &s); err != nil || s.Status < 100 || s.Status > 999 {
		problem(w, http.StatusInternalServerError, "bad-stored-response", "the stored response cannot be replayed",
			"the operation with this key is done (marked done by once keys, once effect or a person), but no response was stored to replay; do not repeat it under a new key")
		return
	}
	if s.Omitted > 0 {
		s.Header = withoutBodyHeaders(s.Header)
	}
	for k, v := range s.Header {
		w.Header()[k] = v
	}
	w.Header().Set(ReplayedHeader, "true")
	if s.Omitted > 0 {
		w.Header().Set(OmittedHeader, strconv.Itoa(s.Omitted))
	}
	w.WriteHeader(s.Status)
	_, _ = w.Write(s.Body)
}

func unavailable(w http.ResponseWriter, err error) {
	w.Header().Set("Retry-After", "1")
	problem(w, http.StatusServiceUnavailable, "store-unavailable", "the idempotency store is unavailable",
		"nothing was executed; retry with the same key ("+err.Error()+")")
}

// problemBase is the type URI prefix of the problems this package sends.
const problemBase = "https://github.com/once-run/once/blob/main/docs/idempotency-http.md#"

// problem writes an RFC 9457 problem+json response.
func problem(w http.ResponseWriter, status int, typ, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": problemBase + typ, "title": title, "status": status, "detail": detail})
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return "http-" + hex.EncodeToString(b[:])
}

// recorder buffers a handler's response.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

// WriteHeader keeps the first final status. An informational one (103 Early Hints) is not the
// response's status, as net/http's own writer treats it: it is dropped, not stored and replayed.
func (r *recorder) WriteHeader(code int) {
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		return
	}
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}
