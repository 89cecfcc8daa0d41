package postgres

import (
	"context"

	"github.com/once-run/once/store"
)

// Acquire takes the task's lease when it is free or expired by the server's clock (store.Leaser),
// in one round trip (acquire); a seat with req.Limit, a takeover with req.Replace (sqlstore.Acquire).
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	return s.Store.Acquire(ctx, req, replaceUntil, s.acquire)
}

// replaceUntil is the new expiry of a grant taken over (sqlstore.TakeOver).
const replaceUntil = "{now} + ?::bigint * interval '1 microsecond'"
