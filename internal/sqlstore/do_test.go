package sqlstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// retryDialect is only what Do asks of a dialect: which errors are transient, and which say the
// server is full. (The stores' own tests run Do against real servers.)
type retryDialect struct{ Dialect }

var errFull, errReset = errors.New("too many connections"), errors.New("connection reset")

func (retryDialect) Retryable(err error) bool {
	return errors.Is(err, errFull) || errors.Is(err, errReset)
}
func (retryDialect) Full(err error) bool      { return errors.Is(err, errFull) }
func (retryDialect) MapError(err error) error { return err }

// A full server is waited for past the retry budget; other trouble is not.
func TestDoWaitsForAFullServer(t *testing.T) {
	s := &Store{Dialect: retryDialect{}, Retries: 3, Backoff: time.Millisecond}
	calls := 0
	err := s.Do(context.Background(), func(context.Context) error {
		if calls++; calls <= 12 {
			return errFull
		}
		return nil
	})
	if err != nil || calls != 13 {
		t.Fatalf("full server: %v after %d calls, want success after 13", err, calls)
	}
	calls = 0
	err = s.Do(context.Background(), func(context.Context) error { calls++; return errReset })
	if !errors.Is(err, errReset) || calls != 4 {
		t.Fatalf("reset: %v after %d calls, want the error after 4", err, calls)
	}
	// Never past the caller's context.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = s.Do(ctx, func(context.Context) error { return errFull })
	if !errors.Is(err, errFull) || time.Since(began) > 2*time.Second {
		t.Fatalf("full server past the context: %v after %s", err, time.Since(began))
	}
}

// TestMaxFailures: SlotQuery counts failures up to store.MaxFailures.
func TestMaxFailures(t *testing.T) {
	if maxFailures != strconv.Itoa(store.MaxFailures) {
		t.Fatalf("maxFailures is %s, store.MaxFailures %d", maxFailures, store.MaxFailures)
	}
}
