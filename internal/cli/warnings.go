package cli

import (
	"context"
	"log/slog"
	"sync"

	"github.com/once-run/once/store"
)

// warnings is a slog.Handler for once doctor: what stores report through store.Warn (records with
// a "check" attribute) becomes a finding of the report instead of a log line, so that doctor says
// it once; every other record goes on to the one logger.
type warnings struct {
	next slog.Handler
	mu   *sync.Mutex
	got  *[]store.Finding
}

func newWarnings(next slog.Handler) warnings {
	return warnings{next: next, mu: &sync.Mutex{}, got: &[]store.Finding{}}
}

// Enabled: warnings are collected whatever the log level.
func (w warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || w.next.Enabled(ctx, l)
}

func (w warnings) Handle(ctx context.Context, r slog.Record) error {
	check := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "check" {
			check = a.Value.String()
		}
		return check == ""
	})
	if check == "" || r.Level < slog.LevelWarn {
		if !w.next.Enabled(ctx, r.Level) {
			return nil
		}
		return w.next.Handle(ctx, r)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	*w.got = append(*w.got, store.Finding{Check: check, Level: store.LevelWarn, Message: r.Message})
	return nil
}

func (w warnings) WithAttrs(as []slog.Attr) slog.Handler {
	return warnings{next: w.next.WithAttrs(as), mu: w.mu, got: w.got}
}

func (w warnings) WithGroup(name string) slog.Handler {
	return warnings{next: w.next.WithGroup(name), mu: w.mu, got: w.got}
}

// addTo appends the collected warnings to fs, but not one whose message a finding already has
// (the store's own Inspect reported it, usually at a truer level).
func (w warnings) addTo(fs []store.Finding) []store.Finding {
	w.mu.Lock()
	defer w.mu.Unlock()
	have := map[string]bool{}
	for _, f := range fs {
		have[f.Message] = true
	}
	for _, g := range *w.got {
		if !have[g.Message] {
			have[g.Message] = true
			fs = append(fs, g)
		}
	}
	return fs
}
