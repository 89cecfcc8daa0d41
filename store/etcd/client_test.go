package etcd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestFailover: the first endpoint refuses connections; every call, the watch included, goes to
// the next one.
func TestFailover(t *testing.T) {
	dsn := strings.Replace(withPrefix(t), "etcd://", "etcd://127.0.0.1:1,", 1)
	ctx := ctxT(t, 30*time.Second)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "f", Holder: "h", RunID: "r", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lost := s.Lost(l)
	if _, err := s.Begin(ctx, store.Attempt{Task: "f", Slot: "s", RunID: "r", Holder: "h", Token: l.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Renew(ctx, l, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("release not seen by Lost through the second endpoint")
	}
}

// startEtcd starts a private etcd with the extra flags and returns host:port; it is killed in
// t.Cleanup.
func startEtcd(t *testing.T, extra ...string) string {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if r := os.Getenv("ONCE_TEST_REQUIRE"); r == "all" || strings.Contains(r, "etcd") {
			t.Fatal("etcd is not installed; run ./scripts/test")
		}
		t.Skip("etcd is not installed")
	}
	port, peer := freePort(t), freePort(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, append([]string{"--name", "p", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "http://127.0.0.1:" + port, "--advertise-client-urls", "http://127.0.0.1:" + port,
		"--listen-peer-urls", "http://127.0.0.1:" + peer, "--initial-advertise-peer-urls", "http://127.0.0.1:" + peer,
		"--initial-cluster", "p=http://127.0.0.1:" + peer}, extra...)...)
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited; logf.Close() })
	ep := "127.0.0.1:" + port
	waitHealthy(t, ep, exited, filepath.Join(dir, "server.log"))
	return ep
}

// serverStart bounds a private server's start: under CI's load (four race-built test binaries on
// two cores) it can take many seconds; a server that answers sooner is used sooner.
const serverStart = 60 * time.Second

// waitHealthy waits until the etcd at ep answers /health, failing with its log if it exits first.
func waitHealthy(t *testing.T, ep string, exited <-chan struct{}, log string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	for deadline := time.Now().Add(serverStart); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			b, _ := os.ReadFile(log)
			t.Fatalf("the private etcd exited:\n%s", b)
		default:
		}
		if resp, err := client.Get("http://" + ep + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	b, _ := os.ReadFile(log)
	t.Fatalf("the private etcd did not answer within %s:\n%s", serverStart, b)
}

// startAuthEtcd starts a private etcd with authentication on (user root, password pw) and simple
// tokens that expire after tokenTTL seconds of idleness. It returns host:port.
func startAuthEtcd(t *testing.T, tokenTTL int) string {
	ep := startEtcd(t, "--auth-token-ttl", fmt.Sprint(tokenTTL))
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(path, body string) {
		t.Helper()
		var last error
		for deadline := time.Now().Add(serverStart); time.Now().Before(deadline); {
			resp, err := client.Post("http://"+ep+path, "application/json", strings.NewReader(body))
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				// "already exists": an earlier try that timed out here was done by the server.
				if resp.StatusCode == http.StatusOK || bytes.Contains(b, []byte("already exists")) {
					return
				}
				err = fmt.Errorf("%s: %s", resp.Status, b)
			}
			last = err
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: %v", path, last)
	}
	post("/v3/auth/user/add", `{"name":"root","password":"pw"}`)
	post("/v3/auth/role/add", `{"name":"root"}`)
	post("/v3/auth/user/grant", `{"user":"root","role":"root"}`)
	post("/v3/auth/enable", `{}`)
	return ep
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// TestAuth: user and password in the DSN authenticate; an expired token is renewed on the fly;
// a wrong password or none is ErrUnavailable naming the credentials, never showing the password.
func TestAuth(t *testing.T) {
	ep := startAuthEtcd(t, 1)
	ctx := ctxT(t, 2*time.Minute)
	// Open's default bound (2.5 s) is not the point: on a loaded machine, a fresh server's first
	// logins (bcrypt) took longer. A server that answers sooner is not waited for.
	const dial = "dial_timeout=30s"
	s, err := Open(ctx, "etcd://root:pw@"+ep+"?prefix=auth&"+dial)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "a", Holder: "h", RunID: "r", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // the simple token expires after 1s idle
	if _, err := s.Begin(ctx, store.Attempt{Task: "a", Slot: "s", RunID: "r", Holder: "h", Token: l.Token}); err != nil {
		t.Fatalf("begin after the token expired: %v", err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	for _, dsn := range []string{"etcd://root:wrongsecret@" + ep + "?" + dial, "etcd://" + ep + "?" + dial} {
		_, err := Open(ctx, dsn)
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "credentials") || strings.Contains(err.Error(), "wrongsecret") {
			t.Errorf("open %s: %v; want ErrUnavailable about the credentials", store.Redact(dsn), err)
		}
	}
}

// TestNotEtcd: a server that does not speak etcd's gRPC API is reported in one line saying what
// is wrong: an HTTP/1.1-only server, and an HTTP/2 server that is not gRPC.
func TestNotEtcd(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		srv := &http.Server{Handler: http.NotFoundHandler(), Protocols: new(http.Protocols)}
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(h2)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(ln) }()
		s, err := Open(ctxT(t, 10*time.Second), "etcd://"+ln.Addr().String())
		srv.Close()
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "etcd 3.x client URL") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("open of a non-etcd server (HTTP/2 %v): %v", h2, err)
		}
		t.Logf("HTTP/2 %v: %v", h2, err)
	}
}

// grpcFrame frames a message as gRPC does.
func grpcFrame(m []byte) []byte {
	b := make([]byte, 5, 5+len(m))
	binary.BigEndian.PutUint32(b[1:], uint32(len(m)))
	return append(b, m...)
}

// FuzzWireDecode: whatever a server streams back, decoding never panics, and an error status is
// always an apiError the store maps to ErrUnavailable or ErrNotHeld. The input is the body; its
// first byte picks the trailers' status.
func FuzzWireDecode(f *testing.F) {
	kv := appendInt(appendInt(appendBytes(nil, 1, []byte("foo"), false), 2, 7, false), 6, -1, false)
	created := appendBool(appendMsg(nil, 1, empty{}), 3, true)
	deleted := appendBytes(appendInt(nil, 1, 1, false), 2, kv, true)
	for _, s := range [][]byte{
		append([]byte{0}, grpcFrame(created)...),
		append([]byte{0}, grpcFrame(appendBytes(nil, 11, deleted, true))...),
		append([]byte{14}, grpcFrame(appendBool(appendInt(nil, 5, 7, false), 4, true))...),
		{5},
		{0, 0, 0, 0, 0, 3, 0x0a, 0x05}, // truncated message
		{0, 1, 0, 0, 0, 1, 0},          // compressed
		{0, 0, 0xff, 0xff, 0xff, 0xff}, // over the limit
		append([]byte{0}, grpcFrame(appendBytes(nil, 3, appendBytes(nil, 1, appendBytes(nil, 2, kv, true), true), true))...),
	} {
		f.Add(s)
	}
	s := &Store{where: "fuzz"}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		tr := http.Header{}
		tr.Set("Grpc-Status", fmt.Sprint(b[0]%17))
		tr.Set("Grpc-Message", "etcdserver:%20no%20leader")
		resp := &http.Response{Body: io.NopCloser(bytes.NewReader(b[1:])), Trailer: tr}
		st := &stream{resp: resp, method: mWatch}
		for range 4 {
			var w watchResp
			err := st.next(&w)
			if err == nil {
				continue
			}
			var ae *apiError
			if errors.As(err, &ae) {
				if m := s.mapErr(err); !errors.Is(m, store.ErrUnavailable) && !errors.Is(m, store.ErrNotHeld) {
					t.Fatalf("mapErr(%v) = %v", err, m)
				}
			}
			break
		}
		for _, m := range []pbOut{&txnResp{}, &rangeResp{}, &leaseResp{}, &alarmResp{}, &memberListResp{}, &statusResp{}, &authResp{}} {
			_ = m.unmarshalPB(b)
		}
	})
}

// TestWireRoundTrip: what the encoders write, the decoders of the same fields read back.
func TestWireRoundTrip(t *testing.T) {
	kv := keyValue{Key: []byte("/once/p/l/t"), CreateRevision: 42, ModRevision: 43, Value: []byte("v"), Lease: 7}
	b := appendBytes(nil, 1, kv.Key, false)
	b = appendInt(b, 2, int64(kv.CreateRevision), false)
	b = appendInt(b, 3, int64(kv.ModRevision), false)
	b = appendInt(b, 4, 1, false) // version: skipped
	b = appendBytes(b, 5, kv.Value, false)
	b = appendInt(b, 6, int64(kv.Lease), false)
	rr := appendMsg(nil, 1, rawMsg(appendInt(nil, 3, 99, false)))
	rr = appendBytes(rr, 2, b, true)
	rr = appendInt(rr, 4, 1, false)
	tx := appendBool(appendMsg(nil, 1, rawMsg(appendInt(nil, 3, 99, false))), 2, true)
	tx = appendBytes(tx, 3, appendBytes(nil, 1, rr, true), true)
	var got txnResp
	if err := got.unmarshalPB(tx); err != nil {
		t.Fatal(err)
	}
	if !got.Succeeded || got.Header.Revision != 99 || len(got.Responses) != 1 || got.Responses[0].Range == nil ||
		len(got.Responses[0].Range.Kvs) != 1 || got.Responses[0].Range.Count != 1 {
		t.Fatalf("decoded %+v", got)
	}
	if g := got.Responses[0].Range.Kvs[0]; string(g.Key) != string(kv.Key) || g.CreateRevision != 42 || g.ModRevision != 43 || string(g.Value) != "v" || g.Lease != 7 {
		t.Fatalf("kv %+v", g)
	}
	// A oneof's zero is sent: CREATE = 0 is field 5 with value 0.
	c := cmpCreate("k", 0).marshalPB(nil)
	if want := []byte{0x10, 1, 0x1a, 1, 'k', 0x28, 0}; !bytes.Equal(c, want) {
		t.Fatalf("compare %x, want %x", c, want)
	}
	// Negative int64s are ten-byte varints, as protobuf writes them.
	if l := appendInt(nil, 6, -1, false); len(l) != 11 {
		t.Fatalf("lease -1: %x", l)
	}
}

// rawMsg is an encoded message.
type rawMsg []byte

func (m rawMsg) marshalPB(b []byte) []byte { return append(b, m...) }

// TestPrefixEnd: the range end of a prefix is the first key after every key with the prefix.
func TestPrefixEnd(t *testing.T) {
	for p, want := range map[string]string{"/once/a/": "/once/a0", "a\xff": "b", "\xff\xff": "\x00"} {
		if got := string(prefixEnd(p)); got != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", p, got, want)
		}
	}
}

// TestPEMFilesNotDevices: a CA, certificate or key that is a FIFO or a device is refused before it
// is opened (a FIFO blocked Open, SIGTERM included; /dev/zero filled the memory).
func TestPEMFilesNotDevices(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ca.fifo")
	if err := exec.Command("mkfifo", fifo).Run(); err != nil {
		t.Skip("mkfifo:", err)
	}
	for _, cfg := range []Config{{CA: fifo}, {CA: "/dev/zero"}, {Cert: "/dev/zero", Key: "/dev/zero"}} {
		done := make(chan error, 1)
		go func() { _, err := tlsConfig(cfg); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, store.ErrBadDSN) || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("tlsConfig(%+v) = %v", cfg, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("tlsConfig(%+v) still reading after 5s", cfg)
		}
	}
}
