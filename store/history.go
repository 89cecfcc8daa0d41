package store

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Cursor is a position in history order. Every Entry carries its own (Entry.Cursor, in the text
// form of String), and HistoryQuery.Before and After take one back to page from there.
//
// History order is newest first: by At (an attempt's start, an event's time), then events before
// attempts of the same instant, then by Key and Seq, both descending. Key and Seq are the store's:
// the SQL stores leave Key empty and number rows (Seq); the key-value stores set Key to the entry's
// task and slot and Seq to its place in that slot's document. The order is total and stable, so a
// walk by cursors sees every entry that was there for the whole walk exactly once, whatever is
// written meanwhile.
type Cursor struct {
	At    time.Time // microsecond precision
	Event bool
	Key   string
	Seq   int64 // ≥ 0
}

// CursorOf returns the position of an attempt (event false) or an event.
func CursorOf(at time.Time, event bool, key string, seq int64) Cursor {
	return Cursor{At: at.Truncate(time.Microsecond), Event: event, Key: key, Seq: seq}
}

// Precedes reports whether c comes before d in history order: c is newer, or as new and first.
func (c Cursor) Precedes(d Cursor) bool {
	switch a, b := c.At.UnixMicro(), d.At.UnixMicro(); {
	case a != b:
		return a > b
	case c.Event != d.Event:
		return c.Event
	case c.Key != d.Key:
		return c.Key > d.Key
	}
	return c.Seq > d.Seq
}

// String is the cursor's text form: "MICROS.a.SEQ" for an attempt, "MICROS.e.SEQ" for an event,
// with ".KEY" (unpadded base64url) when Key is set. Callers treat it as opaque.
func (c Cursor) String() string {
	kind := "a"
	if c.Event {
		kind = "e"
	}
	s := strconv.FormatInt(c.At.UnixMicro(), 10) + "." + kind + "." + strconv.FormatInt(c.Seq, 10)
	if c.Key != "" {
		s += "." + base64.RawURLEncoding.EncodeToString([]byte(c.Key))
	}
	return s
}

// maxCursorLen bounds a cursor's text: a key-value store's key is a task (≤ 200 bytes) and a slot.
const maxCursorLen = 1024

// ParseCursor reads a cursor given out by History (Entry.Cursor). Anything else is refused with
// an error wrapping ErrInvalid: a cursor is accepted only in the exact form String writes.
func ParseCursor(s string) (Cursor, error) {
	bad := func(why string) (Cursor, error) {
		shown := s
		if len(shown) > 64 {
			shown = shown[:64] + "…"
		}
		return Cursor{}, &invalidValue{fmt.Sprintf("history cursor %q: %s; give the cursor of an entry as once history printed it", shown, why)}
	}
	if len(s) > maxCursorLen {
		return bad("too long")
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 && len(parts) != 4 {
		return bad("not MICROS.KIND.SEQ")
	}
	us, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return bad("its time is not a whole number of microseconds")
	}
	var c Cursor
	switch parts[1] {
	case "a":
	case "e":
		c.Event = true
	default:
		return bad("its kind is not a (attempt) or e (event)")
	}
	seq, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || seq < 0 {
		return bad("its sequence number is not a whole number ≥ 0")
	}
	c.At, c.Seq = time.UnixMicro(us).UTC(), seq
	if len(parts) == 4 {
		k, err := base64.RawURLEncoding.DecodeString(parts[3])
		if err != nil || len(k) == 0 {
			return bad("its key is not base64url")
		}
		c.Key = string(k)
	}
	if c.String() != s {
		return bad("not in its canonical form")
	}
	return c, nil
}

// InPage reports whether an entry at position c falls within q's Before and After cursors (both
// already parsed; nil when not given).
func InPage(c Cursor, before, after *Cursor) bool {
	return (before == nil || before.Precedes(c)) && (after == nil || c.Precedes(*after))
}

// Cursors checks q's Kind (CheckKind) and parses its Before and After (nil when empty): every
// History calls it first, so a query is refused the same way on every store.
func (q HistoryQuery) Cursors() (before, after *Cursor, err error) {
	if err := CheckKind(q.Kind); err != nil {
		return nil, nil, err
	}
	if q.Before != "" {
		c, err := ParseCursor(q.Before)
		if err != nil {
			return nil, nil, err
		}
		before = &c
	}
	if q.After != "" {
		c, err := ParseCursor(q.After)
		if err != nil {
			return nil, nil, err
		}
		after = &c
	}
	return before, after, nil
}

// HistoryPager is implemented by ledgers that read a page of history from an index, so that a
// page costs the same at any depth (the SQL stores). PageSize is the page EachHistory asks for.
// The other ledgers read their whole history for any page, and EachHistory reads them in one call.
type HistoryPager interface {
	HistoryPageSize() int
}

// EachHistory calls fn for every entry q selects, newest first, and stops at the first error. On
// a HistoryPager it reads page after page by cursor, so memory stays bounded by the page however
// long the history; q.Limit (0: all) bounds the walk.
func EachHistory(ctx context.Context, l Ledger, q HistoryQuery, fn func(Entry) error) error {
	p, ok := l.(HistoryPager)
	if !ok || p.HistoryPageSize() <= 0 || q.After != "" {
		// After pages from the other end: read it in one call.
		es, err := l.History(ctx, q)
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	}
	size, left := p.HistoryPageSize(), q.Limit
	for {
		page := q
		page.Limit = size
		if left > 0 && left < size {
			page.Limit = left
		}
		es, err := l.History(ctx, page)
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := fn(e); err != nil {
				return err
			}
		}
		if left > 0 {
			if left -= len(es); left <= 0 {
				return nil
			}
		}
		if len(es) < page.Limit {
			return nil
		}
		q.Before = es[len(es)-1].Cursor
	}
}
