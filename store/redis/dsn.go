package redis

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/store"
)

// Mode is how the store reaches Redis.
type Mode int

const (
	ModeSingle   Mode = iota // redis://, rediss://: one server
	ModeCluster              // redis+cluster://, rediss+cluster://: a Redis Cluster, from seed nodes
	ModeSentinel             // redis+sentinel://, rediss+sentinel://: the master a set of sentinels names
)

// Config is a parsed DSN.
type Config struct {
	Mode Mode
	// Opts are the connection options: of the server (ModeSingle), or the ones every node's or the
	// master's connections share (Addr is then the first host of the DSN).
	Opts             *goredis.Options
	Addrs            []string // ModeCluster: seed nodes; ModeSentinel: the sentinels
	Master           string   // ModeSentinel: the master's name (?master=)
	SentinelUser     string   // ModeSentinel: ?sentinel_user=
	SentinelPassword string   // ModeSentinel: ?sentinel_password=
	Prefix           string   // key prefix, default "once"
	// Wait is the number of replicas each lease grant and ledger write waits for (WAIT); 0 does not
	// wait. WaitTimeout bounds that wait (default 1s).
	Wait        int
	WaitTimeout time.Duration
}

// Params are the query parameters a redis:// DSN accepts (docs/stores/redis.md): prefix, wait,
// wait_timeout and go-redis's own URL options. SentinelParams are accepted by redis+sentinel://
// only.
var Params = []string{
	"prefix", "wait", "wait_timeout", "protocol", "client_name", "max_retries", "min_retry_backoff", "max_retry_backoff",
	"dial_timeout", "read_timeout", "write_timeout", "pool_fifo", "pool_size", "pool_timeout",
	"min_idle_conns", "max_idle_conns", "max_active_conns", "conn_max_idle_time", "conn_max_lifetime",
	"skip_verify",
}

// MaxConns bounds pool_size, min_idle_conns, max_idle_conns and max_active_conns.
const MaxConns = 1000

// SentinelParams: the master's name, and the sentinels' own credentials when they have any.
var SentinelParams = []string{"master", "sentinel_user", "sentinel_password"}

var refused = map[string]string{
	"db":       "give the database number in the path: redis://host:6379/13",
	"password": "give it in the user info: redis://:PASSWORD@host, or use a password file",
	"addr":     "list every host in the host part: redis+cluster://host1:6379,host2:6379",
}

var (
	spec = store.QuerySpec{Store: "redis", Doc: "docs/stores/redis.md", Known: Params, Refused: withRefused(map[string]string{
		"master": "only for Sentinel: redis+sentinel://sentinel1:26379,sentinel2:26379/0?master=NAME",
	})}
	sentinelSpec = store.QuerySpec{Store: "redis", Doc: "docs/stores/redis.md", Known: append(append([]string{}, Params...), SentinelParams...), Refused: refused}
)

func withRefused(m map[string]string) map[string]string {
	for k, v := range refused {
		m[k] = v
	}
	m["sentinel_user"], m["sentinel_password"] = m["master"], m["master"]
	return m
}

// modes maps each scheme to its mode, the plain scheme of its connections and the default port.
var modes = map[string]struct {
	mode  Mode
	plain string
	port  string
}{
	"redis": {ModeSingle, "redis", "6379"}, "rediss": {ModeSingle, "rediss", "6379"},
	"redis+cluster": {ModeCluster, "redis", "6379"}, "rediss+cluster": {ModeCluster, "rediss", "6379"},
	"redis+sentinel": {ModeSentinel, "redis", "26379"}, "rediss+sentinel": {ModeSentinel, "rediss", "26379"},
}

// ParseDSN parses a Redis DSN strictly (store.ParseURL, Params; prefix default "once"):
//
//	redis[s]://[user:password@]host[:port][/db][?…]
//	redis[s]+cluster://[user:password@]host:port[,host:port…][/][?…]
//	redis[s]+sentinel://[user:password@]host:port[,host:port…][/db]?master=NAME[&sentinel_user=&sentinel_password=][&…]
//
// The user info is the data nodes' (the cluster's, the master's). Errors wrap store.ErrBadDSN,
// name what is wrong and never contain a password.
func ParseDSN(dsn string) (Config, error) {
	scheme := ""
	if i := strings.Index(dsn, "://"); i > 0 {
		scheme = strings.ToLower(dsn[:i])
	}
	m, ok := modes[scheme]
	if !ok || m.mode == ModeSingle {
		return parseSingle(dsn)
	}
	sp := spec
	if m.mode == ModeSentinel {
		sp = sentinelSpec
	}
	bad := func(format string, a ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: %s in %q", store.ErrBadDSN, fmt.Sprintf(format, a...), store.Redact(dsn))
	}
	rest, q, err := store.SplitDSN(sp, dsn, scheme)
	if err != nil {
		return Config{}, err
	}
	userinfo := ""
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		userinfo, rest = rest[:at+1], rest[at+1:]
	}
	hosts, path, _ := strings.Cut(rest, "/")
	cfg := Config{Mode: m.mode}
	for _, h := range strings.Split(hosts, ",") {
		addr, err := store.HostPort(h, m.port)
		if err != nil {
			return bad("host %q: %v", h, err)
		}
		cfg.Addrs = append(cfg.Addrs, addr)
	}
	if m.mode == ModeCluster && path != "" {
		return bad("a path: a Redis Cluster has database 0 only, remove it")
	}
	if m.mode == ModeSentinel {
		if cfg.Master, ok = q.Take("master"); !ok {
			return bad("no master name: add ?master=NAME, the name the sentinels monitor (sentinel monitor NAME …)")
		}
		cfg.SentinelUser, _ = q.Take("sentinel_user")
		cfg.SentinelPassword, _ = q.Take("sentinel_password")
	}
	if path != "" {
		path = "/" + path
	}
	// The options every connection shares are read by the one-server parser, from a redis:// DSN
	// of the first host: the same parameters, checked the same way.
	one := m.plain + "://" + userinfo + cfg.Addrs[0] + path
	if len(q) > 0 {
		one += "?" + q.Encode()
	}
	c, err := parseSingle(one)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %s", store.ErrBadDSN, strings.ReplaceAll(strings.TrimPrefix(err.Error(), store.ErrBadDSN.Error()+": "), store.Redact(one), store.Redact(dsn)))
	}
	cfg.Opts, cfg.Prefix, cfg.Wait, cfg.WaitTimeout = c.Opts, c.Prefix, c.Wait, c.WaitTimeout
	if cfg.Opts.TLSConfig != nil {
		cfg.Opts.TLSConfig.ServerName = "" // each node's certificate is checked against its own host
	}
	return cfg, nil
}

// parseSingle parses a redis:// or rediss:// DSN.
func parseSingle(dsn string) (Config, error) {
	u, q, err := store.ParseURL(spec, dsn, "redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel")
	if err != nil {
		return Config{}, err
	}
	if _, ok := q["skip_verify"]; ok && u.Scheme != "rediss" {
		return Config{}, fmt.Errorf("%w: redis parameter \"skip_verify\": only for TLS, rediss://", store.ErrBadDSN)
	}
	prefix, ok := q.Take("prefix")
	if !ok {
		prefix = "once"
	}
	cfg := Config{Prefix: prefix, WaitTimeout: time.Second}
	if v, ok := q.Take("wait"); ok {
		if cfg.Wait, err = strconv.Atoi(v); err != nil || cfg.Wait < 0 || cfg.Wait > 100 {
			return Config{}, fmt.Errorf("%w: redis parameter \"wait\" is %q: give the number of replicas (0-100) each grant and ledger write must reach", store.ErrBadDSN, v)
		}
	}
	if v, ok := q.Take("wait_timeout"); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Millisecond || d > time.Minute {
			return Config{}, fmt.Errorf("%w: redis parameter \"wait_timeout\" is %q: give a duration between 1ms and 1m, e.g. 1s", store.ErrBadDSN, v)
		}
		cfg.WaitTimeout = d
	}
	// The database: plain digits. go-redis takes "/-5" and then selects no database (0: maybe
	// another deployment's ledger).
	if db := strings.Trim(u.Path, "/"); db != "" && strings.Trim(db, "0123456789") != "" {
		return Config{}, fmt.Errorf("%w: %s: invalid database number %q: give /0 to /15 (or leave it out for 0)", store.ErrBadDSN, store.Redact(dsn), db)
	}
	// dial_timeout is checked here, as go-redis will read it: a number is seconds (go-redis
	// multiplies it by time.Second, and a huge one wraps around; one past an int, on a 32-bit
	// build, it refused in its own words), else a duration.
	if v, ok := q["dial_timeout"]; ok {
		d, _ := time.ParseDuration(v)
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			d = 0
			if n >= 1 && n <= 3600 {
				d = time.Duration(n) * time.Second
			}
		}
		if err := store.CheckConnectTimeout("redis", "dial_timeout", v, d, ""); err != nil {
			return Config{}, err
		}
	}
	// RESP 2 or 3: go-redis takes any number and speaks 3 for what it does not know.
	if v, ok := q["protocol"]; ok && v != "2" && v != "3" {
		return Config{}, fmt.Errorf("%w: redis parameter \"protocol\" is %q: give 2 or 3 (RESP2, RESP3)", store.ErrBadDSN, v)
	}
	// Connection counts: go-redis panics in NewClient on a negative pool_size or any count past an
	// int32, and a huge min_idle_conns would open that many connections to the server.
	for _, k := range []string{"pool_size", "min_idle_conns", "max_idle_conns", "max_active_conns"} {
		if v, ok := q[k]; ok {
			if n, err := strconv.Atoi(v); err != nil || n < 0 || n > MaxConns {
				return Config{}, fmt.Errorf("%w: redis parameter %q is %q: give a number of connections from 0 to %d", store.ErrBadDSN, k, v, MaxConns)
			}
		}
	}
	u.RawQuery = q.Encode()
	opts, err := goredis.ParseURL(u.String())
	if err != nil {
		// go-redis names the option and the value it could not read; only net/url quotes the URL.
		msg := strings.TrimPrefix(err.Error(), "redis: ")
		var ue *url.Error
		if errors.As(err, &ue) {
			msg = "not a valid URL"
		}
		return Config{}, fmt.Errorf("%w: %s: %s", store.ErrBadDSN, store.Redact(dsn), msg)
	}
	// WAIT blocks for up to wait_timeout: a read timeout below that would cut it off.
	if cfg.Wait > 0 && opts.ReadTimeout >= 0 && opts.ReadTimeout < cfg.WaitTimeout+time.Second {
		opts.ReadTimeout = max(opts.ReadTimeout, cfg.WaitTimeout+time.Second, 3*time.Second)
	}
	cfg.Opts = opts
	return cfg, nil
}
