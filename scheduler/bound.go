package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// storeStepTimeout bounds each step of the node's own reading and writing of the store outside a
// launch: a step of the poll loop (the schema, pauses and triggers, the follow-up of watched
// slots, the tidy) and one account of a job. A database/sql connection whose server stopped
// answering without closing it (a partition that drops packets, a NAT or firewall that forgot the
// connection, a frozen server) waits on its read until the kernel gives up (about 15 minutes with
// tcp_retries2 = 15) or for ever (a peer whose kernel still answers): the step that drew it would
// hold the node's pauses, triggers, follow-ups and accounts that long, and a drain too. With the
// bound, the call fails as an unavailable store does, the connection is dropped, and the next poll
// reads through a new one. A launch is not bounded by it: the job's work and the recording of its
// outcome are the guard's (once.Do), bounded by the lease.
//
// Long enough for a slow store that answers (a poll step reads a page or a few; a healthy store
// answers in milliseconds, docs/daemon.md) — a step that takes this long on a live store fails and
// is tried again at the next poll, as on an outage.
const storeStepTimeout = 30 * time.Second

// errStoreSilent is the cause of a step's context that ran out of storeStepTimeout.
var errStoreSilent = fmt.Errorf("the store did not answer within %s", storeStepTimeout)

// bounded is ctx ended after storeStepTimeout, for one step of the node's own store calls.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, storeStepTimeout, errStoreSilent)
}

// stopping reports whether ctx ended because the node stops (Run's context, a launch's end), not
// because a step ran out of storeStepTimeout: an error then is not worth a warning, nor a retry.
func stopping(ctx context.Context) bool {
	return ctx.Err() != nil && !errors.Is(context.Cause(ctx), errStoreSilent)
}

// step runs fn, one step of the poll loop, with ctx bounded by storeStepTimeout.
func step(ctx context.Context, fn func(context.Context)) {
	sctx, cancel := bounded(ctx)
	defer cancel()
	fn(sctx)
}
