package redis

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/store"
)

// Config is a parsed DSN.
type Config struct {
	Opts   *goredis.Options
	Prefix string // key prefix, default "once"
}

// Params are the query parameters a redis:// DSN accepts (docs/stores/redis.md): prefix and
// go-redis's own URL options.
var Params = []string{
	"prefix", "protocol", "client_name", "max_retries", "min_retry_backoff", "max_retry_backoff",
	"dial_timeout", "read_timeout", "write_timeout", "pool_fifo", "pool_size", "pool_timeout",
	"min_idle_conns", "max_idle_conns", "max_active_conns", "conn_max_idle_time", "conn_max_lifetime",
	"skip_verify",
}

var spec = store.QuerySpec{Store: "redis", Doc: "docs/stores/redis.md", Known: Params, Refused: map[string]string{
	"db":       "give the database number in the path: redis://host:6379/13",
	"password": "give it in the user info: redis://:PASSWORD@host, or use a password file",
}}

// ParseDSN parses a redis:// or rediss:// DSN strictly (store.ParseURL, Params; prefix default
// "once"). Errors wrap store.ErrBadDSN, name what is wrong and never contain the password.
func ParseDSN(dsn string) (Config, error) {
	u, q, err := store.ParseURL(spec, dsn, "redis", "rediss")
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
	return Config{Opts: opts, Prefix: prefix}, nil
}
