package store_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/etcd"
	_ "github.com/once-run/once/store/mysql"
	_ "github.com/once-run/once/store/postgres"
	_ "github.com/once-run/once/store/redis"
	_ "github.com/once-run/once/store/zk"
)

// silent listens and accepts but never answers: a frozen server. It returns its port.
func silent(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// closed returns a port nobody listens on.
func closed(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestUnreachableFailsFast: every server store's Open fails with ErrUnavailable within
// store.ConnectTimeout (and a little) when nothing listens on the port and when the server accepts
// but never answers, so a launch exits 69 within 3 s (issue 13).
func TestUnreachableFailsFast(t *testing.T) {
	dsns := map[string]func(port string) string{
		"postgres": func(p string) string { return "postgres://u:p@127.0.0.1:" + p + "/db?sslmode=disable" },
		"mysql":    func(p string) string { return "mysql://u:p@127.0.0.1:" + p + "/db" },
		"redis":    func(p string) string { return "redis://127.0.0.1:" + p + "/0" },
		"etcd":     func(p string) string { return "etcd://127.0.0.1:" + p },
		"zk":       func(p string) string { return "zk://127.0.0.1:" + p },
	}
	for name, dsn := range dsns {
		for how, port := range map[string]func(*testing.T) string{"closed": closed, "silent": silent} {
			t.Run(name+"/"+how, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				began := time.Now()
				s, err := store.Open(ctx, dsn(port(t)))
				took := time.Since(began)
				if err == nil {
					s.Close()
					t.Fatal("opened")
				}
				if !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("%v, want ErrUnavailable", err)
				}
				if took > store.ConnectTimeout+2*time.Second { // the client's own timeouts are 5-25 s
					t.Errorf("took %s, want at most %s", took, store.ConnectTimeout)
				}
				t.Logf("%s: %v", took.Round(time.Millisecond), err)
			})
		}
	}
}

// A DSN's own connect timeout: from 1 ms to an hour; zero, negative and longer refused with
// ErrBadDSN naming the store, the parameter and the value.
func TestCheckConnectTimeout(t *testing.T) {
	for _, c := range []struct {
		d  time.Duration
		ok bool
	}{{time.Millisecond, true}, {5 * time.Second, true}, {time.Hour, true}, {0, false}, {-time.Second, false}, {time.Hour + 1, false}, {time.Microsecond, false}} {
		err := store.CheckConnectTimeout("pg", "connect_timeout", c.d.String(), c.d, "seconds")
		if (err == nil) != c.ok || err != nil && (!errors.Is(err, store.ErrBadDSN) || !strings.Contains(err.Error(), `pg parameter "connect_timeout" is "`+c.d.String()+`"`)) {
			t.Errorf("%s: %v, want ok %v", c.d, err, c.ok)
		}
	}
}
