package etcd

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

// Config is a parsed DSN.
type Config struct {
	Endpoints []string
	Username  string
	Password  string
	Prefix    string        // key prefix under /once/, default "once"
	Dial      time.Duration // dial_timeout, default store.ConnectTimeout
	// TLS: etcds://. CA is the file of the CA certificates the servers' are checked against (the
	// system roots when empty); Cert and Key the client certificate's files, both or neither.
	TLS                bool
	CA, Cert, Key      string
	ServerName         string // the name the servers' certificates are checked for (default: each endpoint's host)
	InsecureSkipVerify bool   // skip_verify=true: no check of the servers' certificates (tests only)
}

// Params are the query parameters an etcd:// DSN accepts (docs/stores/etcd.md); TLSParams only
// etcds:// ones.
var (
	Params    = []string{"prefix", "dial_timeout"}
	TLSParams = []string{"ca", "cert", "key", "server_name", "skip_verify"}
)

const tlsOnly = "only for TLS: etcds://host:2379?ca=/path/ca.pem"

var (
	spec = store.QuerySpec{Store: "etcd", Doc: "docs/stores/etcd.md", Known: Params,
		Refused: map[string]string{"ca": tlsOnly, "cert": tlsOnly, "key": tlsOnly, "server_name": tlsOnly, "skip_verify": tlsOnly}}
	tlsSpec = store.QuerySpec{Store: "etcd", Doc: "docs/stores/etcd.md", Known: append(append([]string{}, Params...), TLSParams...)}
)

// ParseDSN parses etcd[s]://[user:password@]host:port[,host:port…][/][?prefix=&dial_timeout=]
// strictly (store.SplitDSN, Params; etcds:// is TLS and takes TLSParams too). Errors wrap
// store.ErrBadDSN and never contain the password. It reads no file: Open does.
func ParseDSN(dsn string) (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: %s in %q; use etcd://host:2379[,host:2379]?prefix=name", store.ErrBadDSN, fmt.Sprintf(format, a...), store.Redact(dsn))
	}
	sp, tlsOn := spec, strings.HasPrefix(strings.ToLower(dsn), "etcds://")
	if tlsOn {
		sp = tlsSpec
	}
	hostpart, q, err := store.SplitDSN(sp, dsn, "etcd", "etcds")
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Prefix: "once", Dial: store.ConnectTimeout, TLS: tlsOn}
	cfg.CA, cfg.Cert, cfg.Key, cfg.ServerName = q["ca"], q["cert"], q["key"], q["server_name"]
	if (cfg.Cert == "") != (cfg.Key == "") {
		return Config{}, fmt.Errorf("%w: etcd parameters \"cert\" and \"key\" go together: give both files of the client certificate, or neither", store.ErrBadDSN)
	}
	if v, ok := q["skip_verify"]; ok {
		if v != "true" && v != "false" {
			return Config{}, fmt.Errorf("%w: etcd parameter \"skip_verify\" is %q: give true or false", store.ErrBadDSN, v)
		}
		cfg.InsecureSkipVerify = v == "true"
	}
	hostpart = strings.TrimSuffix(hostpart, "/")
	if i := strings.LastIndex(hostpart, "@"); i >= 0 {
		ui := hostpart[:i]
		hostpart = hostpart[i+1:]
		user, pw, _ := strings.Cut(ui, ":")
		var err1, err2 error
		cfg.Username, err1 = url.PathUnescape(user)
		cfg.Password, err2 = url.PathUnescape(pw)
		if err1 != nil || err2 != nil {
			return bad("bad percent-escape in the user or password (write '%%' as %%25)")
		}
		if cfg.Username == "" && cfg.Password != "" {
			return bad("a password without a user name (etcd authenticates a user: etcd://USER:PASSWORD@host)")
		}
	}
	if strings.Contains(hostpart, "/") {
		return bad("a path is not allowed")
	}
	for _, h := range strings.Split(hostpart, ",") {
		hp, err := store.HostPort(h, "2379")
		if err != nil {
			return bad("endpoint %q: %v", h, err)
		}
		cfg.Endpoints = append(cfg.Endpoints, hp)
	}
	if v, ok := q["prefix"]; ok {
		cfg.Prefix = v
	}
	if v, ok := q["dial_timeout"]; ok {
		if cfg.Dial, err = store.ParseConnectTimeout("etcd", "dial_timeout", v); err != nil {
			return Config{}, err
		}
	}
	return cfg, nil
}
