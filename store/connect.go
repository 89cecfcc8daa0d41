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
