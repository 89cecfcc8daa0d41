package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

// pruneBatch is how many entries one prune transaction looks at: its row locks are held for
// milliseconds, so runs writing meanwhile wait that long at most.
const pruneBatch = 2000

// Prune removes old history by store.PruneRequest.Decide (see store.Ledger), in batches of short
// READ COMMITTED transactions that walk the entries older than r.Before in time order: attempts
// first (forgetting a slot removes its events too), then events. A decision read in a batch stays
// right while runs write: writes only ever make an entry more removable (a new attempt supersedes,
// a resolution settles), except a new entry since r.Before, which ForgetSlots reads in the same
// statement as the rest.
func (s *Store) Prune(ctx context.Context, r store.PruneRequest) (store.PruneResult, error) {
	var res store.PruneResult
	if err := store.CheckPrune(r); err != nil {
		return res, err
	}
	p := &pruner{s: s, r: r, cps: map[[2]string]int{}}
	for _, pass := range []func(ctx context.Context, tx *sql.Tx) (int, error){p.attempts, p.events} {
		p.pos = position{at: time.Unix(0, 0).UTC().AddDate(-100, 0, 0)}
		if !r.Since.IsZero() {
			p.pos = position{at: r.Since, id: -1}
		}
		for {
			var n int
			batch, start := res, p.pos
			err := s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				p.res, p.pos = batch, start // a retried batch starts again
				var err error
				n, err = pass(ctx, tx)
				return err
			})
			if err != nil {
				return res, err
			}
			res = p.res
			if n < pruneBatch {
				break
			}
		}
	}
	return res, nil
}

type position struct {
	at time.Time
	id int64
}

type pruner struct {
	s   *Store
	r   store.PruneRequest
	pos position
	res store.PruneResult
	// cps caches the number of a slot's latest attempt with a checkpoint for this Prune, read once
	// per slot (an index search, CheckpointQuery). A newer checkpoint can only be reported by a
	// running attempt, which is never removed.
	cps map[[2]string]int
}

// lastCols and lastJoin read the last attempt of x's slot (number, state, start, end,
// resolution) by a backward read of (task, slot, attempt) that stops at the first row: on
// PostgreSQL one LATERAL join (a join on a correlated MAX would scan the slot), on MySQL one scalar
// subquery per column (MariaDB has no LATERAL).
func (s *Store) lastCols() string {
	if s.Flavor != MySQL {
		return `l.attempt, l.state, l.started_at, l.ended_at, l.res_as`
	}
	var cols []string
	for _, c := range []string{"attempt", "state", "started_at", "ended_at", "res_as"} {
		cols = append(cols, `(SELECT l.`+c+` FROM {p}attempts l`+s.force("attempts_number")+
			` WHERE l.task = x.task AND l.slot = x.slot ORDER BY l.attempt DESC LIMIT 1)`)
	}
	return strings.Join(cols, ",\n\t\t")
}

func (s *Store) lastJoin() string {
	if s.Flavor == MySQL {
		return ""
	}
	return ` LEFT JOIN LATERAL (SELECT attempt, state, started_at, ended_at, res_as FROM {p}attempts l
		WHERE l.task = x.task AND l.slot = x.slot ORDER BY l.attempt DESC LIMIT 1) l ON true`
}

// PruneAttemptsQuery reads a batch of attempts after a position in time order with the facts
// store.PruneFacts needs, each an index search. Arguments: [before, before (forget)], before,
// the position's time twice and id, [task]. Exported for the backends' plan tests.
func (s *Store) PruneAttemptsQuery(forget, task bool) string {
	recent := `0`
	if forget {
		recent = `CASE WHEN EXISTS (SELECT 1 FROM {p}attempts y` + s.force("attempts_slot_time") +
			` WHERE y.task = x.task AND y.slot = x.slot AND y.started_at >= ?)
			OR EXISTS (SELECT 1 FROM {p}events y` + s.force("events_slot_time") +
			` WHERE y.task = x.task AND y.slot = x.slot AND y.happened_at >= ?) THEN 1 ELSE 0 END`
	}
	cond := `x.started_at < ? AND x.started_at >= ? AND (x.started_at > ? OR x.id > ?)`
	index := "attempts_started"
	if task {
		cond += ` AND x.task = ?`
		index = "attempts_task_time"
	}
	return s.Q(`SELECT x.id, x.task, x.slot, x.attempt, x.state, x.started_at, ` + s.lastCols() + `, ` + recent + `
		FROM {p}attempts x` + s.force(index) + s.lastJoin() + ` WHERE ` + cond + ` ORDER BY x.started_at, x.id LIMIT ` + strconv.Itoa(pruneBatch))
}

// PruneEventsQuery reads a batch of events like PruneAttemptsQuery. Arguments: before, the
// position's time twice and id, [task].
func (s *Store) PruneEventsQuery(task bool) string {
	cond := `x.happened_at < ? AND x.happened_at >= ? AND (x.happened_at > ? OR x.id > ?)`
	index := "events_time"
	if task {
		cond += ` AND x.task = ?`
		index = "events_task_time"
	}
	return s.Q(`SELECT x.id, x.kind, x.attempt, x.happened_at, ` + s.lastCols() + `
		FROM {p}events x` + s.force(index) + s.lastJoin() + ` WHERE ` + cond + ` ORDER BY x.happened_at, x.id LIMIT ` + strconv.Itoa(pruneBatch))
}

// CheckpointQuery reads the number of a slot's latest attempt with a checkpoint (no row: none), an
// index search (checkpointed). Arguments: task, slot. Exported for the backends' plan tests.
func (s *Store) CheckpointQuery() string {
	return s.Q(`SELECT p.attempt FROM {p}attempts p` + s.checkpointed("p", "?", "?") + ` ORDER BY p.attempt DESC LIMIT 1`)
}

func scanLast(f *store.PruneFacts, number sql.NullInt64, state sql.NullString, started, ended sql.NullTime, resAs sql.NullString) {
	if !number.Valid {
		return
	}
	f.Last = store.Attempt{Number: int(number.Int64), State: store.State(state.String), StartedAt: started.Time}
	if ended.Valid {
		t := ended.Time
		f.Last.EndedAt = &t
	}
	if resAs.Valid && resAs.String != "" {
		f.Last.Resolution = &store.Resolution{As: store.State(resAs.String)}
	}
}

// pruneCand is an attempt prune considers, with the facts PruneRequest.Decide needs.
type pruneCand struct {
	id  int64
	key [2]string // task, slot
	f   store.PruneFacts
}

// candidates reads the next page of attempts to consider, from p.pos on, and moves p.pos past it.
func (p *pruner) candidates(ctx context.Context, tx *sql.Tx) ([]pruneCand, error) {
	s, r := p.s, p.r
	var args []any
	if r.ForgetSlots {
		args = append(args, r.Before, r.Before)
	}
	args = append(args, r.Before, p.pos.at, p.pos.at, p.pos.id)
	if r.Task != "" {
		args = append(args, r.Task)
	}
	rows, err := tx.QueryContext(ctx, s.PruneAttemptsQuery(r.ForgetSlots, r.Task != ""), args...)
	if err != nil {
		return nil, err
	}
	var cands []pruneCand
	for rows.Next() {
		var (
			c              pruneCand
			state          string
			lNum           sql.NullInt64
			lState, lRes   sql.NullString
			lStart, lEnd   sql.NullTime
			recent, number int
		)
		if err := rows.Scan(&c.id, &c.key[0], &c.key[1], &number, &state, &c.f.At, &lNum, &lState, &lStart, &lEnd, &lRes, &recent); err != nil {
			rows.Close()
			return nil, err
		}
		c.f.Kind, c.f.Number, c.f.Recent, c.f.Slotless = store.State(state), number, recent == 1, c.key[1] == ""
		scanLast(&c.f, lNum, lState, lStart, lEnd, lRes)
		p.pos = position{c.f.At, c.id}
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return cands, nil
}

// checkpoint is the number of the slot's latest attempt with a checkpoint (p.cps).
func (p *pruner) checkpoint(ctx context.Context, tx *sql.Tx, key [2]string) (int, error) {
	if cp, ok := p.cps[key]; ok {
		return cp, nil
	}
	var cp int
	err := tx.QueryRowContext(ctx, p.s.CheckpointQuery(), key[0], key[1]).Scan(&cp)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	if len(p.cps) > 100_000 {
		clear(p.cps)
	}
	p.cps[key] = cp
	return cp, nil
}

func (p *pruner) attempts(ctx context.Context, tx *sql.Tx) (int, error) {
	s, r := p.s, p.r
	cands, err := p.candidates(ctx, tx)
	if err != nil {
		return 0, err
	}
	var drop []any
	var forget [][2]string
	for _, c := range cands {
		// The checkpoint matters only to an attempt that would otherwise go.
		if c.f.Kind != store.Running && c.f.Number < c.f.Last.Number {
			if c.f.Checkpoint, err = p.checkpoint(ctx, tx, c.key); err != nil {
				return 0, err
			}
		}
		switch r.Decide(c.f) {
		case store.Drop:
			drop = append(drop, c.id)
		case store.Forget:
			if c.f.Number < c.f.Last.Number {
				drop = append(drop, c.id) // the slot goes whole when its last attempt is reached
				break
			}
			forget = append(forget, c.key)
			p.res.Slots++
			if r.DryRun {
				p.res.Attempts++
			}
		}
	}
	if r.DryRun {
		p.res.Attempts += int64(len(drop))
		return len(cands), nil
	}
	if len(drop) > 0 {
		n, err := execN(ctx, tx, s.Q(`DELETE FROM {p}attempts WHERE state <> 'running' AND id IN (`+marks(len(drop))+`)`), drop...)
		if err != nil {
			return 0, err
		}
		p.res.Attempts += n
	}
	for _, k := range forget {
		n, err := execN(ctx, tx, s.Q(`DELETE FROM {p}attempts WHERE task = ? AND slot = ? AND state <> 'running'`), k[0], k[1])
		if err != nil {
			return 0, err
		}
		p.res.Attempts += n
		if n, err = execN(ctx, tx, s.Q(`DELETE FROM {p}events WHERE task = ? AND slot = ?`), k[0], k[1]); err != nil {
			return 0, err
		}
		p.res.Events += n
		delete(p.cps, k)
	}
	return len(cands), nil
}

func (p *pruner) events(ctx context.Context, tx *sql.Tx) (int, error) {
	s, r := p.s, p.r
	args := []any{r.Before, p.pos.at, p.pos.at, p.pos.id}
	if r.Task != "" {
		args = append(args, r.Task)
	}
	rows, err := tx.QueryContext(ctx, s.PruneEventsQuery(r.Task != ""), args...)
	if err != nil {
		return 0, err
	}
	var drop []any
	n := 0
	for rows.Next() {
		var (
			id           int64
			kind         string
			attempt      int
			lNum         sql.NullInt64
			lState, lRes sql.NullString
			lStart, lEnd sql.NullTime
		)
		// Recent: a slot's whole removal is the attempts' pass; here only Drop or Keep matters.
		f := store.PruneFacts{Event: true, Recent: true}
		if err := rows.Scan(&id, &kind, &attempt, &f.At, &lNum, &lState, &lStart, &lEnd, &lRes); err != nil {
			rows.Close()
			return 0, err
		}
		n++
		f.Kind, f.Number = store.State(kind), attempt
		scanLast(&f, lNum, lState, lStart, lEnd, lRes)
		p.pos = position{f.At, id}
		if r.Decide(f) != store.Keep {
			drop = append(drop, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if r.DryRun || len(drop) == 0 {
		p.res.Events += int64(len(drop))
		return n, nil
	}
	got, err := execN(ctx, tx, s.Q(`DELETE FROM {p}events WHERE id IN (`+marks(len(drop))+`)`), drop...)
	p.res.Events += got
	return n, err
}

func execN(ctx context.Context, tx *sql.Tx, q string, args ...any) (int64, error) {
	r, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

func marks(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }
