package postgres

import (
	"context"

	"github.com/once-run/once/store"
)

// Acquire takes the task's lease when it is free or expired by the server's clock (store.Leaser),
// in one round trip (acquire); with req.Replace, over a live grant too, in one transaction that
// locks the row and reads the grant it replaces (sqlstore.Replace).
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	if req.Limit >= 2 {
		return s.AcquireSeat(ctx, req, replaceUntil)
	}
	if req.Replace {
		return s.Replace(ctx, req, replaceUntil, s.acquire)
	}
	return s.acquire(ctx, req)
}

// replaceUntil is the new expiry of a grant taken over (sqlstore.TakeOver).
const replaceUntil = "{now} + ?::bigint * interval '1 microsecond'"
