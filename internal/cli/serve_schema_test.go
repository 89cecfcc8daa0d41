package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// aheadStore is a store whose CheckSchema finds the schema upgraded by a newer once.
type aheadStore struct{ store.Store }

func (aheadStore) CheckSchema(context.Context) error {
	return store.SchemaAhead("test", 7, 6)
}

// once serve stops when a newer once upgraded the store while it served: watchSchema cancels the
// server's context and gives the error its exit says.
func TestServeStopsWhenSchemaMovesAhead(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ahead := watchSchema(ctx, aheadStore{}, cancel, slog.New(slog.NewTextHandler(io.Discard, nil)))
	select {
	case <-ctx.Done():
	case <-time.After(3 * schemaPoll):
		t.Fatal("serve not stopped after a poll that found the schema ahead")
	}
	if err := ahead(); !errors.Is(err, store.ErrSchemaAhead) {
		t.Fatalf("the exit's error: %v; want ErrSchemaAhead", err)
	}
}
