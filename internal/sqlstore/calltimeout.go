package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

// DefaultCallTimeout bounds each try of a call (Do) on a SQL store whose DSN gives no call_timeout.
//
// A connection can go silent without being closed: a partition that drops packets, a NAT or
// firewall that forgot it, a server failed over to another machine or frozen. Neither driver bounds
// a statement or a handshake on such a connection: a `once run` (its lease's take, its Begin) or a
// daemon's launch waited until the kernel gave up on it, about 15 minutes with Linux's defaults, for
// ever if the server's kernel still answers. once's own statements take milliseconds; the longest
// measured, a backfill's read of the slots of a week in a slot of a million attempts, seconds.
// Thirty seconds is far past both, and the bound of a daemon's poll-loop step (scheduler): a daemon
// on MySQL whose connections went silent for 10 s ran its job again 51 s after the store answered
// with a minute here (a launch waited on a connection opened during the silence).
const DefaultCallTimeout = 30 * time.Second

// MaxCallTimeout is the longest call_timeout a DSN may give.
const MaxCallTimeout = 24 * time.Hour

// ParseCallTimeout reads a DSN's call_timeout, a Go duration ("30s", "2m") or 0 for none, on behalf
// of backend (postgres, mysql) for its error messages; what is not given is DefaultCallTimeout.
// Under a second is refused: a bound that short would cut a busy server's answers off, and a call
// cut off is reported as unavailable (69), the DSN's fault hidden.
func ParseCallTimeout(backend string, q store.Params) (time.Duration, error) {
	raw, ok := q.Take("call_timeout")
	if !ok {
		return DefaultCallTimeout, nil
	}
	if raw == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < time.Second || d > MaxCallTimeout {
		return 0, fmt.Errorf("%w: %s parameter \"call_timeout\" is %q: give a duration between 1s and 24h with its unit, e.g. 60s, or 0 for none",
			store.ErrBadDSN, backend, raw)
	}
	return d, nil
}

// try runs one try of Do's fn, bounded by s.CallTimeout when it is set. A try cut off by that bound
// (not by ctx) is an error of its own, wrapping store.ErrUnavailable and context.DeadlineExceeded,
// that says what to change; the connection it used was closed by the driver, so the next call
// dials a new one.
func (s *Store) try(ctx context.Context, fn func(ctx context.Context) error) (cutOff bool, err error) {
	if s.CallTimeout <= 0 {
		return false, fn(ctx)
	}
	tctx, cancel := context.WithTimeout(ctx, s.CallTimeout)
	defer cancel()
	err = fn(tctx)
	if err == nil || tctx.Err() == nil || ctx.Err() != nil {
		return false, err
	}
	return true, fmt.Errorf("%w; no answer within %s (the DSN's call_timeout): the connection went silent (a partition, a server failed over or frozen) or the server is this slow; if it is only slow, raise call_timeout",
		s.Dialect.MapError(context.DeadlineExceeded), shortDuration(s.CallTimeout))
}

// shortDuration writes d as a DSN would say it: 1m, not 1m0s.
func shortDuration(d time.Duration) string {
	t := d.String()
	if strings.HasSuffix(t, "m0s") {
		t = strings.TrimSuffix(t, "0s")
	}
	if strings.HasSuffix(t, "h0m") {
		t = strings.TrimSuffix(t, "0m")
	}
	return t
}
