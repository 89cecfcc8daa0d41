package etcd

// A minimal client for etcd's v3 gRPC API: only the calls this store makes, as gRPC over Go's own
// HTTP/2 (net/http) with the messages encoded by hand (wire.go). It exists so that the once binary
// does not link grpc, protobuf and the etcd client, whose package init runs at every start of every
// command; and it calls the member's gRPC server directly, not through its JSON gateway, which adds
// a hop inside etcd to every call.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-run/once/store"
)

// i64 is an int64 of the wire.
type i64 int64

func ptr(v int64) *i64 { p := i64(v); return &p }

// The messages of the calls, with the fields this store uses (wire.go encodes and decodes them).
type (
	header   struct{ Revision i64 }
	keyValue struct {
		Key            []byte
		CreateRevision i64
		ModRevision    i64
		Value          []byte
		Lease          i64
	}
	rangeReq struct {
		Key       []byte
		RangeEnd  []byte
		Limit     i64
		KeysOnly  bool
		CountOnly bool
		Descend   bool // sort by key, descending (etcd then reads the whole range before the limit)
	}
	rangeResp struct {
		Header header
		Kvs    []keyValue
		Count  i64
	}
	putReq struct {
		Key   []byte
		Value []byte
		Lease i64
	}
	deleteReq struct {
		Key      []byte
		RangeEnd []byte
		PrevKV   bool
	}
	deleteResp struct {
		PrevKvs []keyValue
	}
	compare struct {
		Key            []byte
		Target         string // CREATE, MOD, VALUE, LEASE
		Result         string // EQUAL
		CreateRevision *i64
		ModRevision    *i64
		Value          *[]byte
		Lease          *i64
		RangeEnd       []byte // compares every key in [key, range_end)
	}
	op struct {
		Range  *rangeReq
		Put    *putReq
		Delete *deleteReq
		Txn    *txnReq // nested: its compares see the store as before the outer transaction
	}
	opResp struct {
		Range  *rangeResp
		Delete *deleteResp
	}
	txnReq struct {
		Compare []compare
		Success []op
		Failure []op
	}
	txnResp struct {
		Header    header
		Succeeded bool
		Responses []opResp
	}
	leaseResp struct {
		ID  i64
		TTL i64 // 0 from keepalive: the lease does not exist
	}
	watchCreate struct {
		Key           []byte
		StartRevision i64
	}
	event struct {
		Type string // "" is PUT
		Kv   keyValue
	}
	watchResp struct {
		Created         bool
		Canceled        bool
		CompactRevision i64
		CancelReason    string
		Events          []event
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

// apiError is an error etcd answered with: a gRPC status code and etcd's message.
type apiError struct {
	Code    int
	Message string
	Status  int // HTTP status
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
	codeUnimplemented   = 12
	codeUnavailable     = 14
	codeUnauthenticated = 16
)

// The gRPC methods this client calls (etcd's api/etcdserverpb/rpc.proto).
const (
	mRange      = "/etcdserverpb.KV/Range"
	mTxn        = "/etcdserverpb.KV/Txn"
	mGrant      = "/etcdserverpb.Lease/LeaseGrant"
	mRevoke     = "/etcdserverpb.Lease/LeaseRevoke"
	mTimeToLive = "/etcdserverpb.Lease/LeaseTimeToLive"
	mKeepAlive  = "/etcdserverpb.Lease/LeaseKeepAlive"
	mWatch      = "/etcdserverpb.Watch/Watch"
	mAuth       = "/etcdserverpb.Auth/Authenticate"
	mStatus     = "/etcdserverpb.Maintenance/Status"
	mAlarm      = "/etcdserverpb.Maintenance/Alarm"
	mMembers    = "/etcdserverpb.Cluster/MemberList"
)

// client calls the etcd v3 gRPC API of a set of endpoints of one cluster (HTTP/2, over TLS or
// cleartext), failing over to the next endpoint when one cannot be reached.
type client struct {
	eps    []string // host:port
	cur    atomic.Int32
	hc     *http.Client
	user   string
	pass   string
	tokMu  sync.Mutex
	token  string       // auth token, "" without auth
	reauth atomic.Value // time.Time of the last renewal a cancelled watch asked for
	failed atomic.Int32 // the endpoint of the last call that failed (diagnose)
	scheme string       // "http://", or "https://" for etcds://
	closed atomic.Bool  // set by close: every call fails with errClosed
	conns  conns        // the open connections, by endpoint: a call without an answer ends them
}

// errClosed is a call made after Close: the HTTP/2 client would dial again and serve it.
var errClosed = errors.New("the store was closed (Close); open it again")

func newClient(cfg Config) (*client, error) {
	d := &net.Dialer{Timeout: cfg.Dial, KeepAlive: 15 * time.Second}
	// One HTTP/2 connection per member carries every call and watch. Its pings find a dead
	// connection (a partition, a member frozen) in 10+5 s while a watch is open. etcd counts a
	// ping without an open stream as abuse and closes the connection at the third
	// (GOAWAY too_many_pings): an idle connection is closed after 25 s, before that.
	c := &client{eps: cfg.Endpoints, user: cfg.Username, pass: cfg.Password, scheme: "http://"}
	tr := &http.Transport{DialContext: c.conns.dial(d), IdleConnTimeout: 25 * time.Second, DisableCompression: true,
		TLSHandshakeTimeout: cfg.Dial, Protocols: new(http.Protocols),
		HTTP2: &http.HTTP2Config{SendPingTimeout: 10 * time.Second, PingTimeout: 5 * time.Second}}
	c.hc = &http.Client{Transport: tr}
	c.reauth.Store(time.Time{})
	if cfg.TLS {
		tc, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig, c.scheme = tc, "https://"
		tr.Protocols.SetHTTP2(true)
	} else {
		tr.Protocols.SetUnencryptedHTTP2(true) // gRPC's cleartext HTTP/2, with prior knowledge
	}
	return c, nil
}

// tlsConfig reads the DSN's CA and client certificate files. Errors wrap store.ErrBadDSN and name
// the parameter and the file.
func tlsConfig(cfg Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName, InsecureSkipVerify: cfg.InsecureSkipVerify}
	if cfg.CA != "" {
		pem, err := readPEM(cfg.CA)
		if err != nil {
			return nil, fmt.Errorf("%w: etcd parameter \"ca\": %v; give the PEM file of the CA that signed the servers' certificates", store.ErrBadDSN, err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: etcd parameter \"ca\": %s holds no PEM certificate; give the CA's certificate, -----BEGIN CERTIFICATE-----", store.ErrBadDSN, cfg.CA)
		}
	}
	if cfg.Cert != "" {
		certPEM, err := readPEM(cfg.Cert)
		keyPEM, err2 := readPEM(cfg.Key)
		cert, err3 := tls.X509KeyPair(certPEM, keyPEM)
		if err = errors.Join(err, err2); err == nil {
			err = err3
		}
		if err != nil {
			return nil, fmt.Errorf("%w: etcd parameters \"cert\" and \"key\": %v; give the PEM files of a client certificate and its key", store.ErrBadDSN, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// maxPEM bounds a CA, certificate or key file: PEM files are kilobytes.
const maxPEM = 1 << 20

// readPEM reads a PEM file of the DSN: a regular file (a FIFO or a device such as /dev/zero would
// block Open, SIGTERM included, or fill the memory) of at most maxPEM bytes.
func readPEM(path string) ([]byte, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() { // before open: opening a FIFO blocks
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() || fi.Size() > maxPEM {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes", path, maxPEM)
	}
	return io.ReadAll(io.LimitReader(f, maxPEM+1))
}

func (c *client) close() {
	c.closed.Store(true)
	c.hc.CloseIdleConnections()
}

// unreached reports whether err means the request never reached the server (safe to send
// elsewhere even when it is a write).
func unreached(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// cut reports whether err is a connection the server closed, reset or answered with something
// else than HTTP/2 (not a refused dial, not an answer, not a known TLS failure).
func cut(err error) bool {
	var ae *apiError
	return !errors.As(err, &ae) && tlsProblem(err) == "" && !unreached(err) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// diagnose finds out why ep closed a connection without answering (err), for a message that says
// what to change: over TLS, a member that requires a client certificate sends its refusal after the
// handshake, which the HTTP/2 client's first write can turn into a reset; in cleartext, a member
// that serves TLS resets the HTTP/2 preface. One TLS handshake and a read bounded by ctx tell.
func (c *client) diagnose(ctx context.Context, ep string, err error) error {
	tc := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}} // only: does it speak TLS?
	if tr, ok := c.hc.Transport.(*http.Transport); ok && c.scheme == "https://" {
		tc = tr.TLSClientConfig.Clone()
		tc.NextProtos = []string{"h2"}
	}
	d := &tls.Dialer{Config: tc}
	conn, derr := d.DialContext(ctx, "tcp", ep)
	if conn != nil {
		defer conn.Close()
	}
	if c.scheme == "http://" {
		var rec tls.RecordHeaderError
		if derr == nil || !errors.As(derr, &rec) && tlsProblem(derr) != "" {
			return &apiError{Code: -1, Message: err.Error() + ": the server speaks TLS: use etcds://…?ca=/path/ca.pem"}
		}
		return err
	}
	if derr != nil {
		if tlsProblem(derr) != "" {
			return derr
		}
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	if _, rerr := conn.Read(make([]byte, 1)); rerr != nil && tlsProblem(rerr) != "" {
		return rerr
	}
	return err
}

// authenticate gets a token for the DSN's user at ep.
func (c *client) authenticate(ctx context.Context, ep string) error {
	resp, err := c.post(ctx, ep, mAuth, frame(authReq{Name: c.user, Password: c.pass}), false)
	if err == nil {
		err = accepted(resp)
	}
	if err != nil {
		return err
	}
	st := &stream{resp: resp, method: mAuth}
	defer st.close()
	var out authResp
	if err := st.next(&out); err != nil && !errors.Is(err, io.EOF) {
		return err // an error status (the credentials), or the connection: as it is
	}
	if out.Token == "" {
		return &apiError{Code: codeUnauthenticated, Message: "etcd: authenticate answered no token", Status: resp.StatusCode}
	}
	if err := st.end(); err != nil {
		return err
	}
	c.tokMu.Lock()
	c.token = out.Token
	c.tokMu.Unlock()
	return nil
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
		c.failed.Store(int32(i))
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
	return &r, c.call(ctx, mRange, rangeReq{Key: []byte(key)}, &r, true)
}

// rng reads one range.
func (c *client) rng(ctx context.Context, q rangeReq) (*rangeResp, error) {
	var r rangeResp
	return &r, c.call(ctx, mRange, q, &r, true)
}

func (c *client) getPrefix(ctx context.Context, p string) (*rangeResp, error) {
	var r rangeResp
	return &r, c.call(ctx, mRange, rangeReq{Key: []byte(p), RangeEnd: prefixEnd(p)}, &r, true)
}

func (c *client) txn(ctx context.Context, t txnReq) (*txnResp, error) {
	var r txnResp
	return &r, c.call(ctx, mTxn, t, &r, false)
}

func (c *client) grant(ctx context.Context, ttl int64) (leaseResp, error) {
	var r leaseResp
	return r, c.call(ctx, mGrant, leaseGrantReq{TTL: i64(ttl)}, &r, false)
}

func (c *client) revoke(ctx context.Context, id int64) error {
	return c.call(ctx, mRevoke, leaseIDReq{ID: i64(id)}, discard{}, true)
}

// timeToLive is lease id's remaining TTL in whole seconds, rounded down; -1 when it does not exist.
func (c *client) timeToLive(ctx context.Context, id int64) (leaseResp, error) {
	var r leaseResp
	return r, c.call(ctx, mTimeToLive, leaseIDReq{ID: i64(id)}, &r, true)
}

// keepAliveOnce renews lease id; a TTL of 0 means the lease does not exist. The request ends the
// call's sending side, so etcd answers once and ends the call, as a unary call.
func (c *client) keepAliveOnce(ctx context.Context, id int64) (leaseResp, error) {
	var r leaseResp
	return r, c.call(ctx, mKeepAlive, leaseIDReq{ID: i64(id)}, &r, true)
}

// watch starts a watch of key from revision rev and reads its first answer into first. Its
// sending side ends with the request; etcd goes on sending events until the call is closed.
// etcd 3.4 answers a watch made with an expired auth token with a watch created and cancelled at
// once (its reason "… invalid auth token"), not with an error status: the token is renewed (at
// most every 10 s) and the watch made again, once.
func (c *client) watch(ctx context.Context, key string, rev int64, first *watchResp) (*stream, error) {
	req := watchReq{Create: watchCreate{Key: []byte(key), StartRevision: i64(rev)}}
	st, err := c.exchange(ctx, mWatch, req, first, true)
	denied := strings.Contains(first.CancelReason, "invalid auth token") || strings.Contains(first.CancelReason, "permission denied")
	if err != nil || !first.Canceled || !denied || c.user == "" ||
		!c.reauth.Load().(time.Time).Before(time.Now().Add(-10*time.Second)) {
		return st, err
	}
	st.close()
	c.reauth.Store(time.Now())
	if err := c.authenticate(ctx, c.eps[c.cur.Load()]); err != nil {
		return nil, err
	}
	*first = watchResp{}
	return c.exchange(ctx, mWatch, req, first, true)
}
