package zk

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

// Config is a parsed DSN.
type Config struct {
	Servers []string
	Prefix  string        // nodes live under <chroot>/once/<prefix>, default "once"
	Session time.Duration // requested session timeout; the server clamps it to [2, 20] × tickTime
	// Connect is the DSN's connect_timeout, 0 when it gives none: it bounds Open's wait for a
	// session, its authentication and the store's nodes instead of store.ConnectTimeout.
	Connect time.Duration
	// Chroot is the path every node lives under ("" for the root), e.g. "/apps/team": the
	// DSN's path.
	Chroot string
	// User and Password: digest authentication (AddAuth "digest"); the nodes once creates are then
	// this user's alone.
	User, Password string
}

// Params are the query parameters a zk:// DSN accepts (docs/stores/zookeeper.md).
var Params = []string{"prefix", "session_timeout", "connect_timeout"}

var spec = store.QuerySpec{Store: "zk", Doc: "docs/stores/zookeeper.md", Known: Params}

// ParseDSN parses zk://[user:password@]host:port[,host:port…][/chroot/path][?prefix=&session_timeout=&connect_timeout=]
// strictly (store.SplitDSN, Params). Errors wrap store.ErrBadDSN and never contain the password.
func ParseDSN(dsn string) (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: %s in %q; use zk://host:2181[,host:2181]?prefix=name", store.ErrBadDSN, fmt.Sprintf(format, a...), store.Redact(dsn))
	}
	hosts, q, err := store.SplitDSN(spec, dsn, "zk")
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Prefix: "once", Session: 10 * time.Second}
	if i := strings.LastIndex(hosts, "@"); i >= 0 {
		user, pw, hasPw := strings.Cut(hosts[:i], ":")
		hosts = hosts[i+1:]
		var err1, err2 error
		cfg.User, err1 = url.PathUnescape(user)
		cfg.Password, err2 = url.PathUnescape(pw)
		switch {
		case err1 != nil || err2 != nil:
			return bad("bad percent-escape in the user or password (write '%%' as %%25)")
		case cfg.User == "" || !hasPw || cfg.Password == "":
			return bad("user info needs a user and a password (digest authentication: zk://USER:PASSWORD@host)")
		case strings.Contains(cfg.User, ":"):
			return bad("a ':' in the user name (digest authentication splits user:password at the first ':')")
		}
	}
	hosts, path, _ := strings.Cut(hosts, "/")
	if path = strings.TrimSuffix(path, "/"); path != "" {
		for _, c := range strings.Split(path, "/") {
			name, err := url.PathUnescape(c)
			switch {
			case err != nil:
				return bad("bad percent-escape in the chroot path")
			case name == "", name == ".", name == "..", strings.ContainsAny(name, "/\x00"), strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
				return bad("chroot path /%s: give node names separated by single '/', without '.', '..' or control characters", path)
			}
			cfg.Chroot += "/" + name
		}
		if cfg.Chroot == "/zookeeper" || strings.HasPrefix(cfg.Chroot, "/zookeeper/") {
			return bad("chroot path %s: /zookeeper is ZooKeeper's own", cfg.Chroot)
		}
	}
	for _, h := range strings.Split(hosts, ",") {
		hp, err := store.HostPort(h, "2181")
		if err != nil {
			return bad("endpoint %q: %v", h, err)
		}
		cfg.Servers = append(cfg.Servers, hp)
	}
	if v, ok := q["prefix"]; ok {
		cfg.Prefix = v
	}
	if v, ok := q["session_timeout"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > time.Hour {
			return Config{}, fmt.Errorf("%w: zk parameter \"session_timeout\" is %q: give a duration between 1s and 1h, e.g. 10s", store.ErrBadDSN, v)
		}
		cfg.Session = d
	}
	if v, ok := q["connect_timeout"]; ok {
		if cfg.Connect, err = store.ParseConnectTimeout("zk", "connect_timeout", v); err != nil {
			return Config{}, err
		}
	}
	return cfg, nil
}
