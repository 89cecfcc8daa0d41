package store

import (
	"context"
	"fmt"
	"time"
)

// ConnectTimeout is how long a server store's Open tries to reach its server (connect, handshake,
// authentication, the first answer) before it fails with ErrUnavailable, unless the DSN sets the
// backend's own connect or dial timeout. With it an unreachable or frozen server fails a launch with
// 69 within 3 s, the process's start included. Migrations that wait for another process's schema
// lock are not bounded by it: the server answered.
const ConnectTimeout = 2500 * time.Millisecond

// Connecting returns ctx bounded for Open's first contact with the server: by set, the DSN's own
// timeout, when it is positive, else by ConnectTimeout. The returned duration is the bound, for
// Unreached.
func Connecting(ctx context.Context, set time.Duration) (context.Context, context.CancelFunc, time.Duration) {
	d := ConnectTimeout
	if set > 0 {
		d = set
	}
	c, cancel := context.WithTimeout(ctx, d)
	return c, cancel, d
}

// Unreached is the error of an Open whose first contact (Connecting's ctx) ran out of time: what
// the server is (e.g. "postgres 10.0.0.1:5432/db") and the bound.
func Unreached(what string, d time.Duration) error {
	return fmt.Errorf("%w: %s: no answer within %s; check that the server is running and reachable", ErrUnavailable, what, d)
}

// MaxConnectTimeout is the longest connect or dial timeout a DSN may give (CheckConnectTimeout).
const MaxConnectTimeout = time.Hour

// CheckConnectTimeout is the one rule for a DSN's own connect or dial timeout (raw as given, d as
// read), on every server store: from 1 ms to MaxConnectTimeout. Zero and negative values, which
// some clients read as "no timeout", are refused: each later connection to a frozen server would
// wait forever, while Open's first contact would still be bounded by ConnectTimeout, not by what the
// DSN seemed to say. want says what to give, in the parameter's own unit; "" for a Go duration.
// The error wraps ErrBadDSN.
func CheckConnectTimeout(store, param, raw string, d time.Duration, want string) error {
	if d >= time.Millisecond && d <= MaxConnectTimeout {
		return nil
	}
	if want == "" {
		want = "a duration between 1ms and 1h, e.g. 5s"
	}
	return fmt.Errorf("%w: %s parameter %q is %q: give %s", ErrBadDSN, store, param, raw, want)
}

// ParseConnectTimeout reads a connect timeout written as a Go duration ("5s") by CheckConnectTimeout's
// rule: what is not a duration is refused as 0 is.
func ParseConnectTimeout(store, param, raw string) (time.Duration, error) {
	d, _ := time.ParseDuration(raw)
	return d, CheckConnectTimeout(store, param, raw, d, "")
}
