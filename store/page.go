package store

import "time"

// SQLCond is one condition of a WHERE clause, with ? placeholders, and its arguments.
type SQLCond struct {
	SQL  string
	Args []any
}

// PageColumns names, for one branch of a history read (attempts or events), its time column and
// the sequence column that orders entries of the same time.
type PageColumns struct{ Time, Seq string }

// PageConds is the one rule for a history page in SQL, written once for every SQL store: the
// conditions on the attempts' branch (at) and the events' branch (ev) that keep the entries older
// than before and newer than after (either may be nil), in history's order — time descending, and
// at one time events first, then higher sequences first (Cursor.Precedes). value converts a
// cursor's time to the column's type (a time.Time, microseconds…). The conditions are plain
// comparisons on the indexed columns so that the planner sees them.
func PageConds(before, after *Cursor, at, ev PageColumns, value func(time.Time) any) (atConds, evConds []SQLCond) {
	cmp := func(c PageColumns, op string, t any) SQLCond {
		return SQLCond{c.Time + " " + op + " ?", []any{t}}
	}
	// tie: the cursor's own branch, past the cursor: a time beyond it, or the same time and a
	// sequence beyond it (op is < going older, > going newer).
	tie := func(c PageColumns, op string, t any, seq int64) SQLCond {
		return SQLCond{c.Time + " " + op + "= ? AND (" + c.Time + " " + op + " ? OR " + c.Seq + " " + op + " ?)", []any{t, t, seq}}
	}
	if c := before; c != nil {
		t := value(c.At)
		if c.Event { // attempts at the event's time are older than it
			atConds, evConds = append(atConds, cmp(at, "<=", t)), append(evConds, tie(ev, "<", t, c.Seq))
		} else { // events at the attempt's time are newer than it
			atConds, evConds = append(atConds, tie(at, "<", t, c.Seq)), append(evConds, cmp(ev, "<", t))
		}
	}
	if c := after; c != nil {
		t := value(c.At)
		if c.Event {
			atConds, evConds = append(atConds, cmp(at, ">", t)), append(evConds, tie(ev, ">", t, c.Seq))
		} else {
			atConds, evConds = append(atConds, tie(at, ">", t, c.Seq)), append(evConds, cmp(ev, ">=", t))
		}
	}
	return atConds, evConds
}
