package store

import (
	"fmt"
	"testing"
	"time"
)

// The page conditions as SQL reads them: which side of a cursor each branch keeps.
func TestPageConds(t *testing.T) {
	at, ev := PageColumns{"started_at", "rowid"}, PageColumns{"at", "id"}
	ts := time.UnixMicro(1000)
	us := func(t time.Time) any { return t.UnixMicro() }
	for _, c := range []struct {
		before, after *Cursor
		want          string
	}{
		{nil, nil, "[] []"},
		{&Cursor{At: ts, Event: true, Seq: 7}, nil, "[{started_at <= ? [1000]}] [{at <= ? AND (at < ? OR id < ?) [1000 1000 7]}]"},
		{&Cursor{At: ts, Seq: 7}, nil, "[{started_at <= ? AND (started_at < ? OR rowid < ?) [1000 1000 7]}] [{at < ? [1000]}]"},
		{nil, &Cursor{At: ts, Event: true, Seq: 7}, "[{started_at > ? [1000]}] [{at >= ? AND (at > ? OR id > ?) [1000 1000 7]}]"},
		{nil, &Cursor{At: ts, Seq: 7}, "[{started_at >= ? AND (started_at > ? OR rowid > ?) [1000 1000 7]}] [{at >= ? [1000]}]"},
	} {
		a, e := PageConds(c.before, c.after, at, ev, us)
		if got := fmt.Sprint(a, " ", e); got != c.want {
			t.Errorf("PageConds(%+v, %+v):\n got %s\nwant %s", c.before, c.after, got, c.want)
		}
	}
}
