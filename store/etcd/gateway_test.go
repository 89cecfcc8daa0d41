package etcd

import (
	"bytes"
	"encoding/json"
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
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	return "127.0.0.1:" + port
}

// startAuthEtcd starts a private etcd with authentication on (user root, password pw) and simple
// tokens that expire after tokenTTL seconds of idleness. It returns host:port.
func startAuthEtcd(t *testing.T, tokenTTL int) string {
	ep := startEtcd(t, "--auth-token-ttl", fmt.Sprint(tokenTTL))
	post := func(path, body string) {
		t.Helper()
		var last error
		for i := 0; i < 100; i++ {
			resp, err := http.Post("http://"+ep+path, "application/json", strings.NewReader(body))
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
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
	ctx := ctxT(t, 60*time.Second)
	s, err := Open(ctx, "etcd://root:pw@"+ep+"?prefix=auth")
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
	for _, dsn := range []string{"etcd://root:wrongsecret@" + ep, "etcd://" + ep} {
		_, err := Open(ctx, dsn)
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "credentials") || strings.Contains(err.Error(), "wrongsecret") {
			t.Errorf("open %s: %v; want ErrUnavailable about the credentials", store.Redact(dsn), err)
		}
	}
}

// TestNoGateway: a server that is not an etcd gateway is reported in one line saying what is needed.
func TestNoGateway(t *testing.T) {
	srv := &http.Server{Handler: http.NotFoundHandler()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	_, err = Open(ctxT(t, 10*time.Second), "etcd://"+ln.Addr().String())
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "gateway") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("open of a non-etcd server: %v", err)
	}
}

// FuzzGatewayDecode: whatever a server streams back, decoding never panics, and an error
// message is always an apiError the store maps to ErrUnavailable or ErrNotHeld.
func FuzzGatewayDecode(f *testing.F) {
	for _, s := range []string{
		`{"result":{"header":{"revision":"2"},"created":true}}`,
		`{"result":{"events":[{"type":"DELETE","kv":{"key":"Zm9v","mod_revision":"3"}}]}}`,
		`{"result":{"compact_revision":"7","canceled":true}}`,
		`{"result":{"ID":"1611341061358149640","TTL":"60"}}`,
		`{"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader"}}`,
		`{"result":{"header":{"revision":"2"},"succeeded":true,"responses":[{"response_range":{"kvs":[{"key":"Zm9v","create_revision":"2","value":"YQ==","lease":"-1"}]}}]}}`,
		`{"result":{"ID":99999999999999999999}}`,
	} {
		f.Add([]byte(s))
	}
	s := &Store{where: "fuzz"}
	f.Fuzz(func(t *testing.T, b []byte) {
		st := &stream{body: io.NopCloser(bytes.NewReader(b)), dec: json.NewDecoder(bytes.NewReader(b))}
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
		var tr txnResp
		_ = json.Unmarshal(b, &tr)
		var lr leaseResp
		_ = json.Unmarshal(b, &lr)
	})
}

// TestPrefixEnd: the range end of a prefix is the first key after every key with the prefix.
func TestPrefixEnd(t *testing.T) {
	for p, want := range map[string]string{"/once/a/": "/once/a0", "a\xff": "b", "\xff\xff": "\x00"} {
		if got := string(prefixEnd(p)); got != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", p, got, want)
		}
	}
}
