package etcd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// The etcd with TLS (client certificates required) and authentication that
// ./scripts/testenv/etcd_tls.sh starts: user "once" may use /once/ only; tokens expire after 3 s idle.
// Its Opens are bounded by 15 s, not the default 2.5 s: a TLS handshake and a login (bcrypt on the
// server) on a loaded machine can take longer, and the bound is not what these tests are about
// (store/connect_test.go is). A server that answers sooner is not waited for.
func tlsDSN(tb testing.TB) string {
	dsn := storetest.ServerDSN(tb, "ONCE_TEST_ETCD_TLS", "etcd-tls")
	if strings.Contains(dsn, "dial_timeout=") {
		return dsn
	}
	if strings.Contains(dsn, "?") {
		return dsn + "&dial_timeout=15s"
	}
	return dsn + "?dial_timeout=15s"
}

// edit returns dsn with its user info and query parameters changed: a value "" removes one.
func edit(t *testing.T, dsn string, user *url.Userinfo, params map[string]string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if user != nil {
		u.User = user
	}
	q := u.Query()
	for k, v := range params {
		if v == "" {
			q.Del(k)
		} else {
			q.Set(k, v)
		}
	}
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

// TestTLSAuthConformance: the suite over TLS with a client certificate, as a user whose role may
// only use /once/, with tokens that expire while the suite runs (re-authentication).
func TestTLSAuthConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{DSN: func(tb testing.TB) string { return storetest.WithPrefix(tb, tlsDSN(tb)) }})
}

// TestTokenExpiry: after the token expired (3 s idle on the test server), the next call gets a new
// one and succeeds.
func TestTokenExpiry(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	s, err := Open(ctx, storetest.WithPrefix(t, tlsDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.c.tokMu.Lock()
	first := s.c.token
	s.c.tokMu.Unlock()
	time.Sleep(5 * time.Second)
	if _, err := s.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "h", RunID: "r", TTL: 10 * time.Second}); err != nil {
		t.Fatalf("acquire after the token expired: %v", err)
	}
	s.c.tokMu.Lock()
	defer s.c.tokMu.Unlock()
	if s.c.token == first {
		t.Logf("the token did not change (the server kept it alive)")
	}
}

// TestLostAfterTokenExpiry: a watch made when the token has expired (etcd 3.4 answers it created
// and cancelled, "invalid auth token", not with an error) renews the token and watches: a release
// elsewhere reaches Lost. Before, Lost watched again every 200 ms with the dead token and never
// fired.
func TestLostAfterTokenExpiry(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	dsn := storetest.WithPrefix(t, tlsDSN(t))
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "h", RunID: "r", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // the token expires (3 s idle on the test server)
	lost := s.Lost(l)
	time.Sleep(500 * time.Millisecond)
	if err := o.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(8 * time.Second):
		t.Fatal("a release was not seen by Lost after the token expired")
	}
}

// TestTLSAuthErrors: each misconfiguration fails Open with one line that says what is wrong and how
// to fix it, without the password.
func TestTLSAuthErrors(t *testing.T) {
	// The messages are the point, not the connect bound: under -race on a loaded machine, loading
	// the system's roots (the "no CA" case) took longer than the default 2.5 s.
	dsn := edit(t, storetest.WithPrefix(t, tlsDSN(t)), nil, map[string]string{"dial_timeout": "15s"})
	u, _ := url.Parse(dsn)
	port := u.Port()
	other := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(other, otherCA(t), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, dsn string
		is        error
		want      string
	}{
		{"wrong password", edit(t, dsn, url.UserPassword("once", "sekrit-wrong"), nil), store.ErrUnavailable, "check user and password"},
		{"no CA", edit(t, dsn, nil, map[string]string{"ca": ""}), store.ErrUnavailable, "?ca=/path/ca.pem"},
		{"other CA", edit(t, dsn, nil, map[string]string{"ca": other}), store.ErrUnavailable, "?ca=/path/ca.pem"},
		{"no client certificate", edit(t, dsn, nil, map[string]string{"cert": "", "key": ""}), store.ErrUnavailable, "?cert="},
		{"missing CA file", edit(t, dsn, nil, map[string]string{"ca": "/nonexistent/ca.pem"}), store.ErrBadDSN, `"ca"`},
		{"plain HTTP", "etcd://once:sekrit@127.0.0.1:" + port + "?dial_timeout=3s", store.ErrUnavailable, "use etcds://"},
	}
	if plain := os.Getenv("ONCE_TEST_ETCD"); plain != "" {
		pu, _ := url.Parse(plain)
		cases = append(cases, struct {
			name, dsn string
			is        error
			want      string
		}{"TLS to a plain server", "etcds://" + pu.Host + "?dial_timeout=3s", store.ErrUnavailable, "else use etcd://"})
	}
	for _, c := range cases {
		ctx := ctxT(t, 30*time.Second)
		s, err := Open(ctx, c.dsn)
		if err == nil {
			s.Close()
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		msg := err.Error()
		if !errors.Is(err, c.is) || !strings.Contains(msg, c.want) || strings.Contains(msg, "sekrit") || strings.Contains(msg, "\n") {
			t.Errorf("%s: %v; want one line wrapping %v, saying %q", c.name, err, c.is, c.want)
		}
		t.Logf("%s: %s", c.name, msg)
	}
}

// TestTLSAuthPermission: a user whose role does not cover /once/ gets one line naming the prefix
// and the etcdctl command that grants it.
func TestTLSAuthPermission(t *testing.T) {
	root := storetest.ServerDSN(t, "ONCE_TEST_ETCD_TLS_ROOT", "etcd-tls")
	ctx := ctxT(t, 30*time.Second)
	cfg, err := ParseDSN(root)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if err := c.login(ctx); err != nil {
		t.Fatal(err)
	}
	name := "noperm" + storetest.RandHex(t)
	// AuthUserAddRequest's name and password are AuthenticateRequest's fields 1 and 2.
	if err := c.call(ctx, "/etcdserverpb.Auth/UserAdd", authReq{Name: name, Password: "pw"}, discard{}, false); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, edit(t, tlsDSN(t), url.UserPassword(name, "pw"), nil))
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "grant-permission") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("open as a user without permission: %v", err)
	}
	t.Log(err)
}

// otherCA is the PEM of a fresh CA certificate that signed nothing the test server has.
func otherCA(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
