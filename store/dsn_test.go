package store_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/once-run/once/store"
)

var testSpec = store.QuerySpec{Store: "test", Doc: "docs/stores/test.md", Known: []string{"prefix", "timeout", "password", "sslpassword"},
	Refused: map[string]string{"parseTime": "once sets it itself"}}

// TestParseQuery: every rule of the strict parser, with the parameter the error must name.
func TestParseQuery(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want store.Params // nil: refused
		name string       // refused: the error names this
	}{
		{"", store.Params{}, ""},
		{"prefix=team_a", store.Params{"prefix": "team_a"}, ""},
		{"prefix=t1&timeout=5s", store.Params{"prefix": "t1", "timeout": "5s"}, ""},
		{"timeout=%35s", store.Params{"timeout": "5s"}, ""},
		{"password=a%2Bb%20c%3Bd%3De%26f", store.Params{"password": "a+b c;d=e&f"}, ""},
		{"pre%66ix=x", store.Params{"prefix": "x"}, ""},
		// the reported defects: ';' and bad escapes silently dropped the prefix
		{"prefix=teamA;x", nil, `"prefix"`},
		{"prefix=teamB;x", nil, `"prefix"`},
		{"prefix=a%zz", nil, `"prefix"`},
		{"prefix=a;timeout=5s", nil, `"prefix"`},
		{"timeout=5s;prefix=a", nil, `"timeout"`},
		{"a;b=c", nil, `"a;b"`},
		// typos, unknowns, duplicates, empties
		{"prefx=teamB", nil, `"prefx" is not a parameter of test DSNs (did you mean "prefix"?)`},
		{"Prefix=teamb", nil, `did you mean "prefix"?`},
		{"parseTime=true", nil, `"parseTime" is not accepted: once sets it itself`},
		{"prefix=a&prefix=b", nil, `"prefix" is given twice`},
		{"prefix=a&prefix=a", nil, `"prefix" is given twice`},
		{"prefix=", nil, `"prefix" is empty`},
		{"prefix", nil, `"prefix" has no value`},
		{"=x", nil, `not a parameter name`},
		{"prefix=a&", nil, `stray '&'`},
		{"&prefix=a", nil, `stray '&'`},
		{"prefix=a&&timeout=1s", nil, `stray '&'`},
		{"timeout=1+2", nil, `"timeout"`},
		{"timeout=a=b", nil, `"timeout"`},
		{"timeout=%00", nil, `control character`},
		{"timeout=a%0Ab", nil, `control character`},
		{"ti%zzme=1", nil, `"ti%zzme"`},
		// the prefix rule, the same for every store
		{"prefix=teamA", nil, `"prefix" is "teamA"`},
		{"prefix=a-b", nil, `"prefix"`},
		{"prefix=a.b", nil, `"prefix"`},
		{"prefix=1a", nil, `"prefix"`},
		{"prefix=_a", nil, `"prefix"`},
		{"prefix=" + strings.Repeat("a", 33), nil, `"prefix"`},
		{"prefix=" + strings.Repeat("a", 32), store.Params{"prefix": strings.Repeat("a", 32)}, ""},
	} {
		got, err := store.ParseQuery(testSpec, c.raw)
		if c.want != nil {
			if err != nil || len(got) != len(c.want) {
				t.Errorf("ParseQuery(%q) = %v, %v; want %v", c.raw, got, err, c.want)
				continue
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("ParseQuery(%q)[%s] = %q, want %q", c.raw, k, got[k], v)
				}
			}
			continue
		}
		if !errors.Is(err, store.ErrBadDSN) || !strings.Contains(err.Error(), c.name) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseQuery(%q) = %v, %v; want ErrBadDSN naming %s", c.raw, got, err, c.name)
		}
	}
}

// A secret parameter's value never appears in a refusal.
func TestParseQuerySecretNotShown(t *testing.T) {
	for _, raw := range []string{"password=s3cr3t;x", "password=s3cr3t+x", "password=s3cr3t%zz", "sslpassword=s3cr3t=x", "password=s3cr3t%00"} {
		_, err := store.ParseQuery(testSpec, raw)
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("ParseQuery(%q) = %v", raw, err)
		}
	}
}

func TestCheckPrefix(t *testing.T) {
	for p, ok := range map[string]bool{"once": true, "a": true, "team_a1": true, "": false, "A": false, "a-b": false, "a.b": false, "9a": false, "é": false} {
		if err := store.CheckPrefix(p); (err == nil) != ok || err != nil && !errors.Is(err, store.ErrBadDSN) {
			t.Errorf("CheckPrefix(%q) = %v", p, err)
		}
	}
}

func TestParseURL(t *testing.T) {
	for _, c := range []struct{ dsn, want string }{
		{"test://u:p@h:1/db?prefix=a", ""},
		{"TEST://h/db", ""},
		{"test://u:p%zz@h/db", "user or password"},
		{"test://u:pw#x@h/db", "'#'"},
		{"test://h/db?prefix=a#b", "'#'"},
		{"other://h/db", "not a test://… URL"},
		{"test:h/db", "not a test://… URL"},
		{"test://h/db\n", "control character"},
		{"test://h:port/db", "bad port"},
		{"test://h/d%zzb", `"%zz"`},
		// an '@' after a '/': a raw '/' in the password or a raw '@' in the path, refused both ways
		{"test://u:1234/pw#x@h/db", "'#'"},
		{"test://u:1234/sekrit@h/db", "%2F"},
		{"test://h/my@db", "%40"},
		{"test://u:p@h/my@db", "%40"},
		{"test://h/my%40db", ""},
		{"test://u:12%2F34@h/db", ""},
		{"test://u:p@ss@h/db", ""},
	} {
		u, _, err := store.ParseURL(testSpec, c.dsn, "test")
		if c.want == "" {
			if err != nil || u.Scheme != "test" {
				t.Errorf("ParseURL(%q) = %v, %v", c.dsn, u, err)
			}
			continue
		}
		if !errors.Is(err, store.ErrBadDSN) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "pw#x") || strings.Contains(err.Error(), "sekrit") {
			t.Errorf("ParseURL(%q) = %v; want ErrBadDSN with %q", c.dsn, err, c.want)
		}
	}
}

func TestParamsEncode(t *testing.T) {
	p := store.Params{"b": "x y+z", "a": "1/2?&="}
	if got := p.Encode(); got != "a=1%2F2%3F%26%3D&b=x%20y%2Bz" {
		t.Fatalf("Encode = %q", got)
	}
	back, err := store.ParseQuery(store.QuerySpec{Known: []string{"a", "b"}}, p.Encode())
	if err != nil || back["a"] != p["a"] || back["b"] != p["b"] {
		t.Fatalf("round trip: %v %v", back, err)
	}
	if q, err := url.ParseQuery(p.Encode()); err != nil || q.Get("b") != "x y+z" {
		t.Fatalf("net/url reads %v %v", q, err)
	}
}

func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"", "prefix=a", "prefix=teamA;x", "prefix=a%zz", "prefx=b", "prefix=a&prefix=b", "prefix=", "a=b=c",
		"timeout=1+1", "password=p%41ss", "&", "prefix=a&timeout=%35s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := store.ParseQuery(testSpec, raw)
		if err != nil {
			if !errors.Is(err, store.ErrBadDSN) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("ParseQuery(%q): %v", raw, err)
			}
			return
		}
		// Accepted: every key known, once, non-empty; a prefix follows the rule; and the query
		// means the same to net/url (what client libraries use) as to us.
		q, uerr := url.ParseQuery(raw)
		if uerr != nil {
			t.Fatalf("ParseQuery(%q) accepted what net/url refuses: %v", raw, uerr)
		}
		if len(q) != len(p) {
			t.Fatalf("ParseQuery(%q) = %v, net/url %v", raw, p, q)
		}
		for k, v := range p {
			if v == "" || len(q[k]) != 1 || q[k][0] != v {
				t.Fatalf("ParseQuery(%q)[%q] = %q, net/url %q", raw, k, v, q[k])
			}
		}
		if v, ok := p["prefix"]; ok && store.CheckPrefix(v) != nil {
			t.Fatalf("prefix %q accepted", v)
		}
		again, err := store.ParseQuery(testSpec, p.Encode())
		if err != nil || len(again) != len(p) {
			t.Fatalf("Encode(%v) = %q does not parse back: %v", p, p.Encode(), err)
		}
	})
}

// TestPorts: a port out of range is a bad DSN (64) on every store, not a server that gives no
// answer (69 after 2.5 s on ZooKeeper, a dial error on etcd, MySQL and Redis).
func TestPorts(t *testing.T) {
	spec := store.QuerySpec{Store: "x", Known: []string{"prefix"}}
	for _, dsn := range []string{"x://u:sekrit@h:99999/db", "x://h:0/db", "x://h:65536"} {
		if _, _, err := store.ParseURL(spec, dsn, "x"); !errors.Is(err, store.ErrBadDSN) || !strings.Contains(err.Error(), "port") || strings.Contains(err.Error(), "sekrit") {
			t.Errorf("ParseURL(%q) = %v, want store.ErrBadDSN naming the port", dsn, err)
		}
	}
	for in, want := range map[string]string{"h": "h:2181", "h:1": "h:1", "[::1]": "[::1]:2181", "[::1]:5": "[::1]:5", "10.0.0.1:65535": "10.0.0.1:65535"} {
		if got, err := store.HostPort(in, "2181"); err != nil || got != want {
			t.Errorf("HostPort(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "h:0", "h:99999", "h:-1", "h:", "::1", "h:2181/x", "h%20", ":5", "0[0", "a]b", "[a[b]"} {
		if got, err := store.HostPort(in, "2181"); err == nil {
			t.Errorf("HostPort(%q) = %q, want an error", in, got)
		}
	}
}
