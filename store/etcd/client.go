package etcd

// A minimal client for etcd's gRPC gateway (JSON over HTTP/1.1, under /v3/ since etcd 3.4): only the
// calls this store makes. It exists so that the once binary does not link grpc, protobuf and the
// etcd client, whose package init runs at every start of every command.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-run/once/store"
)

// i64 is an int64 that the gateway writes as a JSON string (proto3 JSON mapping).
type i64 int64

func (v i64) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatInt(int64(v), 10) + `"`), nil
}

func (v *i64) UnmarshalJSON(b []byte) error {
	n, err := strconv.ParseInt(strings.Trim(string(b), `"`), 10, 64)
	if err != nil {
		return fmt.Errorf("etcd gateway: bad integer %s", b)
	}
	*v = i64(n)
	return nil
}

func ptr(v int64) *i64 { p := i64(v); return &p }

// Wire types: field names are the proto names, as etcd's gateway uses them. []byte is base64.
type (
	header   struct{ Revision i64 }
	keyValue struct {
		Key            []byte `json:"key"`
		CreateRevision i64    `json:"create_revision"`
		ModRevision    i64    `json:"mod_revision"`
		Value          []byte `json:"value"`
		Lease          i64    `json:"lease"`
	}
	rangeReq struct {
		Key       []byte `json:"key"`
		RangeEnd  []byte `json:"range_end,omitempty"`
		Limit     i64    `json:"limit,omitempty"`
		KeysOnly  bool   `json:"keys_only,omitempty"`
		CountOnly bool   `json:"count_only,omitempty"`
	}
	rangeResp struct {
		Header header     `json:"header"`
		Kvs    []keyValue `json:"kvs"`
		Count  i64        `json:"count"`
	}
	putReq struct {
		Key   []byte `json:"key"`
		Value []byte `json:"value"`
		Lease i64    `json:"lease,omitempty"`
	}
	deleteReq struct {
		Key      []byte `json:"key"`
		RangeEnd []byte `json:"range_end,omitempty"`
		PrevKV   bool   `json:"prev_kv,omitempty"`
	}
	deleteResp struct {
		PrevKvs []keyValue `json:"prev_kvs"`
	}
	compare struct {
		Key            []byte  `json:"key"`
		Target         string  `json:"target"` // CREATE, MOD, VALUE, LEASE
		Result         string  `json:"result"` // EQUAL
		CreateRevision *i64    `json:"create_revision,omitempty"`
		ModRevision    *i64    `json:"mod_revision,omitempty"`
		Value          *[]byte `json:"value,omitempty"`
		Lease          *i64    `json:"lease,omitempty"`
		RangeEnd       []byte  `json:"range_end,omitempty"` // compares every key in [key, range_end)
	}
	op struct {
		Range  *rangeReq  `json:"request_range,omitempty"`
		Put    *putReq    `json:"request_put,omitempty"`
		Delete *deleteReq `json:"request_delete_range,omitempty"`
		Txn    *txnReq    `json:"request_txn,omitempty"` // nested: its compares see the store as before the outer transaction
	}
	opResp struct {
		Range  *rangeResp  `json:"response_range"`
		Delete *deleteResp `json:"response_delete_range"`
	}
	txnReq struct {
		Compare []compare `json:"compare,omitempty"`
		Success []op      `json:"success,omitempty"`
		Failure []op      `json:"failure,omitempty"`
	}
	txnResp struct {
		Header    header   `json:"header"`
		Succeeded bool     `json:"succeeded"`
		Responses []opResp `json:"responses"`
	}
	leaseReq struct {
		TTL i64 `json:"TTL,omitempty"`
		ID  i64 `json:"ID,omitempty"`
	}
	leaseResp struct {
		ID  i64 `json:"ID"`
		TTL i64 `json:"TTL"` // 0 (omitted) from keepalive: the lease does not exist
	}
	watchCreate struct {
		Key           []byte `json:"key"`
		StartRevision i64    `json:"start_revision,omitempty"`
	}
	watchResp struct {
		Created         bool `json:"created"`
		Canceled        bool `json:"canceled"`
		CompactRevision i64  `json:"compact_revision"`
		Events          []struct {
			Type string   `json:"type"` // "" is PUT
			Kv   keyValue `json:"kv"`
		} `json:"events"`
	}
)

func cmpCreate(key string, rev int64) compare {
	return compare{Key: []byte(key), Target: "CREATE", Result: "EQUAL", CreateRevision: ptr(rev)}
}

func cmpMod(key string, rev int64) compare {
	return compare{Key: []byte(key), Target: "MOD", Result: "EQUAL", ModRevision: ptr(rev)}
}

func cmpValue(key, v string) compare {
	b := []byte(v)
	return compare{Key: []byte(key), Target: "VALUE", Result: "EQUAL", Value: &b}
}

func cmpLease(key string, id int64) compare {
	return compare{Key: []byte(key), Target: "LEASE", Result: "EQUAL", Lease: ptr(id)}
}

// cmpNone is true when no key starts with p: etcd compares a zero key when the range is empty.
func cmpNone(p string) compare {
	return compare{Key: []byte(p), RangeEnd: prefixEnd(p), Target: "CREATE", Result: "EQUAL", CreateRevision: ptr(0)}
}

func opGet(key string) op { return op{Range: &rangeReq{Key: []byte(key)}} }

// opRange reads the keys starting with p.
func opRange(p string, keysOnly bool) op {
	return op{Range: &rangeReq{Key: []byte(p), RangeEnd: prefixEnd(p), KeysOnly: keysOnly}}
}

// opDelPrefix deletes the keys starting with p.
func opDelPrefix(p string) op {
	return op{Delete: &deleteReq{Key: []byte(p), RangeEnd: prefixEnd(p)}}
}

// opCount counts the keys starting with p.
func opCount(p string) op {
	return op{Range: &rangeReq{Key: []byte(p), RangeEnd: prefixEnd(p), CountOnly: true}}
}
func opPut(key, v string, lease int64) op {
	return op{Put: &putReq{Key: []byte(key), Value: []byte(v), Lease: i64(lease)}}
}
func opDel(key string, prev bool) op { return op{Delete: &deleteReq{Key: []byte(key), PrevKV: prev}} }

// prefixEnd is the range end that selects every key starting with p.
func prefixEnd(p string) []byte {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return b[:i+1]
		}
	}
	return []byte{0}
}

// apiError is an error the gateway answered with: a gRPC status code and etcd's message.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Status  int    `json:"-"` // HTTP status
}

func (e *apiError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return e.Message
}

// gRPC status codes the store tells apart.
const (
	codeDeadline        = 4
	codeNotFound        = 5
	codePermission      = 7
	codeUnavailable     = 14
	codeUnauthenticated = 16
)

// client talks to the gateway of a set of endpoints of one cluster, failing over to the next
// endpoint when one cannot be reached.
type client struct {
	eps    []string // host:port
	cur    atomic.Int32
	hc     *http.Client
	user   string
	pass   string
	tokMu  sync.Mutex
	token  string // auth token, "" without auth
	scheme string // "http://", or "https://" for etcds://
}

func newClient(cfg Config) (*client, error) {
	d := &net.Dialer{Timeout: cfg.Dial, KeepAlive: 15 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute,
		ResponseHeaderTimeout: 0, DisableCompression: true, TLSHandshakeTimeout: cfg.Dial}
	c := &client{eps: cfg.Endpoints, hc: &http.Client{Transport: tr}, user: cfg.Username, pass: cfg.Password, scheme: "http://"}
	if cfg.TLS {
		tc, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig, c.scheme = tc, "https://"
	}
	return c, nil
}

// tlsConfig reads the DSN's CA and client certificate files. Errors wrap store.ErrBadDSN and name
// the parameter and the file.
func tlsConfig(cfg Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName, InsecureSkipVerify: cfg.InsecureSkipVerify}
	if cfg.CA != "" {
		pem, err := os.ReadFile(cfg.CA)
		if err != nil {
			return nil, fmt.Errorf("%w: etcd parameter \"ca\": %v; give the PEM file of the CA that signed the servers' certificates", store.ErrBadDSN, err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: etcd parameter \"ca\": %s holds no PEM certificate; give the CA's certificate, -----BEGIN CERTIFICATE-----", store.ErrBadDSN, cfg.CA)
		}
	}
	if cfg.Cert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: etcd parameters \"cert\" and \"key\": %v; give the PEM files of a client certificate and its key", store.ErrBadDSN, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func (c *client) close() { c.hc.CloseIdleConnections() }

// unreached reports whether err means the request never reached the server (safe to send
// elsewhere even when it is a write).
func unreached(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// open POSTs in to path and returns the response of the first endpoint that answers 200. A
// request fails over to the next endpoint when it could not be sent, or on any transport error
// or unavailable member when idem (a read, or a write that may safely be applied twice).
func (c *client) open(ctx context.Context, path string, in any, idem bool) (*http.Response, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	authed := false
	n := len(c.eps)
	start := int(c.cur.Load())
	var last error
	for i := 0; i < n; i++ {
		idx := (start + i) % n
		resp, err := c.post(ctx, c.eps[idx], path, body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = readAPIError(resp)
		}
		if err == nil {
			c.cur.Store(int32(idx))
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ae *apiError
		if errors.As(err, &ae) {
			if ae.Code == codeUnauthenticated && c.user != "" && !authed && strings.Contains(ae.Message, "invalid auth token") {
				// The token expired (simple tokens live 5 minutes idle): get a new one, try again.
				authed = true
				if aerr := c.authenticate(ctx, c.eps[idx]); aerr != nil {
					return nil, aerr
				}
				i--
				continue
			}
			if ae.Code != codeUnavailable || !idem {
				return nil, err
			}
		} else if !idem && !unreached(err) {
			return nil, err
		}
		last = err
	}
	return nil, last
}

func (c *client) post(ctx context.Context, ep, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.scheme+ep+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if path == "/v3/watch" {
		// Cancel the watch when the member loses its leader (clientv3.WithRequireLeader).
		req.Header.Set("Grpc-Metadata-Hasleader", "true")
	}
	c.tokMu.Lock()
	tok := c.token
	c.tokMu.Unlock()
	if tok != "" {
		req.Header.Set("Authorization", tok)
	}
	return c.hc.Do(req)
}

// readAPIError reads a non-200 answer: the gateway's JSON status, or a bare HTTP error (no
// gateway at /v3/, e.g. etcd before 3.4 or --enable-grpc-gateway=false).
func readAPIError(resp *http.Response) error {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &apiError{Status: resp.StatusCode}
	if json.Unmarshal(b, e) != nil || e.Message == "" {
		if resp.StatusCode == http.StatusNotFound {
			e.Message = "no gRPC gateway at /v3/ (needs etcd 3.4 or later with the gateway enabled, the default)"
		} else {
			e.Message = fmt.Sprintf("HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(b)))
		}
		if e.Code == 0 {
			e.Code = -1
		}
	}
	return e
}

// call is a unary call: POST in, decode the JSON answer into out.
func (c *client) call(ctx context.Context, path string, in, out any, idem bool) error {
	resp, err := c.open(ctx, path, in, idem)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("etcd gateway: reading %s: %w", path, err)
	}
	return nil
}

// streamMsg is one message of a streamed answer (watch, keepalive).
type streamMsg struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"grpc_code"`
		Message string `json:"message"`
	} `json:"error"`
}

// stream reads newline-delimited {"result": …} messages; an {"error": …} one ends it.
type stream struct {
	body io.ReadCloser
	dec  *json.Decoder
}

func (c *client) stream(ctx context.Context, path string, in any) (*stream, error) {
	resp, err := c.open(ctx, path, in, true)
	if err != nil {
		return nil, err
	}
	return &stream{body: resp.Body, dec: json.NewDecoder(resp.Body)}, nil
}

func (s *stream) next(out any) error {
	var m streamMsg
	if err := s.dec.Decode(&m); err != nil {
		return err
	}
	if m.Error != nil {
		return &apiError{Code: m.Error.Code, Message: m.Error.Message, Status: http.StatusOK}
	}
	return json.Unmarshal(m.Result, out)
}

func (s *stream) close() { _ = s.body.Close() }

// authenticate gets a token for the DSN's user at ep.
func (c *client) authenticate(ctx context.Context, ep string) error {
	body, _ := json.Marshal(map[string]string{"name": c.user, "password": c.pass})
	resp, err := c.postNoAuth(ctx, ep, body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return readAPIError(resp)
	}
	defer resp.Body.Close()
	var out struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Token == "" {
		return &apiError{Code: codeUnauthenticated, Message: "etcd gateway: authenticate answered no token", Status: resp.StatusCode}
	}
	c.tokMu.Lock()
	c.token = out.Token
	c.tokMu.Unlock()
	return nil
}

func (c *client) postNoAuth(ctx context.Context, ep string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.scheme+ep+"/v3/auth/authenticate", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.hc.Do(req)
}

// login authenticates at the first endpoint that can be reached.
func (c *client) login(ctx context.Context) error {
	var last error
	for i, ep := range c.eps {
		err := c.authenticate(ctx, ep)
		if err == nil {
			c.cur.Store(int32(i))
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ae *apiError
		if errors.As(err, &ae) && ae.Code != codeUnavailable {
			return err
		}
		last = err
	}
	return last
}

// --- the calls ---

func (c *client) get(ctx context.Context, key string) (*rangeResp, error) {
	var r rangeResp
	return &r, c.call(ctx, "/v3/kv/range", rangeReq{Key: []byte(key)}, &r, true)
}

// rng reads one range.
func (c *client) rng(ctx context.Context, q rangeReq) (*rangeResp, error) {
	var r rangeResp
	return &r, c.call(ctx, "/v3/kv/range", q, &r, true)
}

func (c *client) getPrefix(ctx context.Context, p string) (*rangeResp, error) {
	var r rangeResp
	return &r, c.call(ctx, "/v3/kv/range", rangeReq{Key: []byte(p), RangeEnd: prefixEnd(p)}, &r, true)
}

func (c *client) txn(ctx context.Context, t txnReq) (*txnResp, error) {
	var r txnResp
	return &r, c.call(ctx, "/v3/kv/txn", t, &r, false)
}

func (c *client) grant(ctx context.Context, ttl int64) (leaseResp, error) {
	var r leaseResp
	return r, c.call(ctx, "/v3/lease/grant", leaseReq{TTL: i64(ttl)}, &r, false)
}

func (c *client) revoke(ctx context.Context, id int64) error {
	var r json.RawMessage
	return c.call(ctx, "/v3/lease/revoke", leaseReq{ID: i64(id)}, &r, true)
}

// timeToLive is lease id's remaining TTL in whole seconds, rounded down; -1 when it does not exist.
func (c *client) timeToLive(ctx context.Context, id int64) (leaseResp, error) {
	var r leaseResp
	return r, c.call(ctx, "/v3/lease/timetolive", leaseReq{ID: i64(id)}, &r, true)
}

// keepAliveOnce renews lease id; a TTL of 0 means the lease does not exist.
func (c *client) keepAliveOnce(ctx context.Context, id int64) (leaseResp, error) {
	st, err := c.stream(ctx, "/v3/lease/keepalive", leaseReq{ID: i64(id)})
	if err != nil {
		return leaseResp{}, err
	}
	defer st.close()
	var r leaseResp
	if err := st.next(&r); err != nil {
		return leaseResp{}, err
	}
	_, _ = io.Copy(io.Discard, st.body) // the stream ends after one answer: keep the connection
	return r, nil
}

// watch starts a watch of key from revision rev.
func (c *client) watch(ctx context.Context, key string, rev int64) (*stream, error) {
	return c.stream(ctx, "/v3/watch", map[string]watchCreate{"create_request": {Key: []byte(key), StartRevision: i64(rev)}})
}
