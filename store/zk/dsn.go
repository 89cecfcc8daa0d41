package zk

import (
	"fmt"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

// Config is a parsed DSN.
type Config struct {
	Servers []string
	Prefix  string        // nodes live under /once/<prefix>, default "once"
	Session time.Duration // requested session timeout; the server clamps it to [2, 20] × tickTime
}

// Params are the query parameters a zk:// DSN accepts (docs/stores/zookeeper.md).
var Params = []string{"prefix", "session_timeout"}

var spec = store.QuerySpec{Store: "zk", Doc: "docs/stores/zookeeper.md", Known: Params}

// ParseDSN parses zk://host:port[,host:port…][/][?prefix=&session_timeout=] strictly
// (store.SplitDSN, Params). Errors wrap store.ErrBadDSN.
func ParseDSN(dsn string) (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: %s in %q; use zk://host:2181[,host:2181]?prefix=name", store.ErrBadDSN, fmt.Sprintf(format, a...), store.Redact(dsn))
	}
	hosts, q, err := store.SplitDSN(spec, dsn, "zk")
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Prefix: "once", Session: 10 * time.Second}
	hosts = strings.TrimSuffix(hosts, "/")
	if strings.Contains(hosts, "@") {
		return bad("user info is not supported (once does not authenticate to ZooKeeper)")
	}
	if strings.Contains(hosts, "/") {
		return bad("a path (chroot) is not supported")
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" || strings.ContainsAny(h, " \t\n%") {
			return bad("endpoint %q", h)
		}
		if !strings.Contains(h, ":") {
			h += ":2181"
		}
		cfg.Servers = append(cfg.Servers, h)
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
	return cfg, nil
}
