package store_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"unicode"

	"github.com/once-run/once/store"
)

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:secret@h:5432/db?sslmode=disable":           "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"mysql://once:p%40ss@127.0.0.1:3306/once":                 "mysql://once:xxxxx@127.0.0.1:3306/once",
		"redis://:pw@127.0.0.1:6379/0":                            "redis://:xxxxx@127.0.0.1:6379/0",
		"redis://127.0.0.1:6379/0?password=pw":                    "redis://127.0.0.1:6379/0?password=xxxxx",
		"sqlite:///var/lib/once/once.db":                          "sqlite:///var/lib/once/once.db",
		"etcd://u:p@a:2379,b:2379":                                "etcd://u:xxxxx@a:2379,b:2379",
		"postgres://h/db?sslmode=verify-full&sslpassword=keypw":   "postgres://h/db?sslmode=verify-full&sslpassword=xxxxx",
		"postgres://h/db?PassWord=pw;application_name=x":          "postgres://h/db?PassWord=xxxxx;application_name=x",
		"host=db user=once password=s3cr3t dbname=once":           "host=db user=once password=xxxxx dbname=once",
		`host=db password = 'it\'s' sslpassword='a b\' c' port=5`: "host=db password = xxxxx sslpassword=xxxxx port=5",
		"host=db password='unterminated":                          "host=xxxxx",
		"once:s3cr3t@db.example/once":                             "once:xxxxx@db.example/once",
		"postgres://u:12/ss@h/db":                                 "postgres://u:xxxxx@h/db",
		"postgres://u:12#34@h/db":                                 "postgres://u:xxxxx@h/db",
		"postgres://u:a?b@c@h/db":                                 "postgres://u:xxxxx@h/db",
		"postgres://u@h/db":                                       "postgres://u@h/db",
		"user is once and the password is secret":                 "user is once and the password is secret",
	} {
		if got := store.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// A message about a key=value string names neither its password nor the text around it.
func TestSchemeConninfo(t *testing.T) {
	_, err := store.Scheme("host=db user=once password=s3cr3t")
	if !errors.Is(err, store.ErrBadDSN) || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "key=value") {
		t.Fatalf("Scheme = %v", err)
	}
}

func TestOpenUnknownScheme(t *testing.T) {
	for _, dsn := range []string{"mongo://x", "nothing", ":x", "a b://c"} {
		_, err := store.Open(context.Background(), dsn)
		if !errors.Is(err, store.ErrBadDSN) {
			t.Errorf("%q: %v, want ErrBadDSN", dsn, err)
		}
	}
}

// FuzzRedact: whatever the password and wherever it is written (URL user info, raw or
// percent-encoded; a password or sslpassword parameter; a key=value string, bare or quoted; user
// info without a scheme), it never appears in Redact's output — unless it would appear anyway,
// because it is part of the user name, the host or the rest of the text (a password equal to the
// user name is not hidden by hiding the password).
func FuzzRedact(f *testing.F) {
	for _, s := range []string{"secret", "p@ss", "a/b", "12#34", "x?y", "it's", "a b", `back\slash`, "once", "h", "%zz", "xxxxx", ":", "@"} {
		f.Add(s, "once", "db.example", uint8(0))
	}
	f.Fuzz(func(t *testing.T, pw, user, host string, form uint8) {
		plain := func(s string) bool { // a user or host name that needs no quoting anywhere
			return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
				return r <= ' ' || r == 0x7f || unicode.IsSpace(r) || strings.ContainsRune(":@/?#&;='\\%", r)
			})
		}
		if pw == "" || !plain(user) || !plain(host) {
			return
		}
		build := func(pw string) string {
			switch form % 8 {
			case 0:
				return "postgres://" + user + ":" + url.QueryEscape(pw) + "@" + host + ":5432/db?sslmode=disable"
			case 1:
				return "postgres://" + user + ":" + pw + "@" + host + "/db" // raw: may be malformed
			case 2:
				return "redis://" + host + "/0?password=" + url.QueryEscape(pw) + "&prefix=a"
			case 3:
				return "postgres://" + host + "/db?sslpassword=" + store.Escape(pw) + "&sslmode=require"
			case 4:
				q := strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(pw)
				return "host=" + host + " user=" + user + " password='" + q + "' dbname=db"
			case 5:
				if strings.ContainsAny(pw, " \t\n\r\f\v'\\") {
					return "" // a bare value cannot hold these
				}
				return "host=" + host + " password=" + pw + " user=" + user
			case 6:
				if strings.HasPrefix(pw, "//") {
					return "" // user://… is a URL with a scheme, not user info
				}
				return user + ":" + pw + "@" + host + "/db"
			default:
				if strings.ContainsAny(pw, "&;") {
					return "" // would be two parameters
				}
				return "mysql://" + host + "/db?tls=true&password=" + pw
			}
		}
		dsn := build(pw)
		if dsn == "" {
			return
		}
		ideal := build(store.Mask)
		out := store.Redact(dsn)
		for _, form := range []string{pw, url.QueryEscape(pw), store.Escape(pw), url.PathEscape(pw)} {
			if strings.Contains(ideal, form) {
				return // trivial: the password is in the text around it
			}
			if strings.Contains(out, form) {
				t.Fatalf("Redact(%q) = %q shows the password %q", dsn, out, pw)
			}
		}
	})
}

// FuzzRedactAny: on any text, Redact never panics and hides user:PASSWORD@.
func FuzzRedactAny(f *testing.F) {
	for _, s := range []string{"postgres://u:secret@h/db", "mysql://u:secret@tcp(h)/db", "redis://:secret@h/0?password=secret", "x://a:secret@@b", "%zz://u:secret@h", "host=h password='x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		out := store.Redact(dsn)
		if i, j := strings.Index(dsn, "://"), strings.LastIndex(dsn, "@"); i >= 0 && j > i {
			userinfo := dsn[i+3 : j]
			if k := strings.Index(userinfo, ":"); k >= 0 && len(userinfo[k+1:]) >= 4 && !strings.Contains(dsn[:i+3+k+1]+"\x00"+dsn[j:], userinfo[k+1:]) &&
				strings.Contains(out, userinfo[k+1:]) && !strings.Contains(store.Mask, userinfo[k+1:]) {
				t.Fatalf("Redact(%q) = %q keeps the password", dsn, out)
			}
		}
		if _, err := store.Scheme(dsn); err != nil && !errors.Is(err, store.ErrBadDSN) {
			t.Fatalf("Scheme error does not wrap ErrBadDSN: %v", err)
		}
	})
}

// TestSchemeEdgeSpace: whitespace or an invisible character (a BOM an editor saved, a zero-width
// space pasted from a page) at a DSN's ends or just before its query is refused (it would be part
// of a file's or database's name: another ledger), without the password; a space inside a path or
// a value is not.
func TestSchemeEdgeSpace(t *testing.T) {
	for _, dsn := range []string{"sqlite:///my dir/once.db", "sqlite:///my dir/once.db?busy_timeout=5s",
		"postgres://u:pa%20ss@h/db?application_name=night job", "redis://:pa%20ss@h:6379/0?prefix=a b",
		"zk://h1:2181, h2:2181/once", "sqlite:///srv/once%20.db"} {
		if _, err := store.Scheme(dsn); err != nil {
			t.Errorf("Scheme(%q) = %v, want nil", dsn, err)
		}
	}
	for _, dsn := range []string{"sqlite:///srv/once.db ", " sqlite:///srv/once.db", "sqlite:///srv/once.db\n",
		"sqlite:///srv/once.db ?busy_timeout=5s", "postgres://u:s3cr3t@h/db\u00a0", "postgres://u:s3cr3t@h/db\t?sslmode=require",
		"\ufeffsqlite:///srv/once.db", "sqlite:///srv/once.db\ufeff", "postgres://u:s3cr3t@h/db\u200b",
		"sqlite:///srv/once.db\u200d?busy_timeout=5s"} {
		_, err := store.Scheme(dsn)
		if !errors.Is(err, store.ErrBadDSN) || !strings.Contains(err.Error(), "whitespace") || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Scheme(%q) = %v, want ErrBadDSN naming the whitespace, without the password", dsn, err)
		}
	}
}

type typedNilStore struct{ store.Store }

// An opener that fails returns its backend's nil *Store, which in the Store interface is not nil:
// Open returns a nil interface with the error, so that `if s != nil { s.Close() }` is safe.
func TestOpenErrorReturnsNilStore(t *testing.T) {
	store.Register("test-typed-nil", func(context.Context, string) (store.Store, error) {
		var s *typedNilStore
		return s, errors.New("refused")
	})
	s, err := store.Open(context.Background(), "test-typed-nil://x")
	if err == nil || s != nil {
		t.Fatalf("Open = %#v, %v; want a nil store with the error", s, err)
	}
	if s, err := store.OpenReader(context.Background(), "test-typed-nil://x"); err == nil || s != nil {
		t.Fatalf("OpenReader = %#v, %v; want a nil store with the error", s, err)
	}
}
