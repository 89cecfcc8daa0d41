package web

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// The read model: what pages, API answers and metrics show, each read bounded by a page, never by
// the size of history (docs/api.md says what each costs).

// Page sizes and bounds.
const (
	defaultPage  = 50
	maxPage      = 500
	maxTasks     = 200  // tasks on one page of the overview
	trendLen     = 10   // attempts in a task's duration trend
	maxTimeline  = 5000 // history entries a timeline reads at most
	maxScan      = 5000 // entries a filtered history page reads at most before it answers
	slotEntries  = 200  // entries of one slot a run detail shows
	slotTails    = 10   // attempts of one slot whose output tail a run detail reads (each up to store.MaxKeyResult)
	reviewEvents = 20   // history entries of a slot shown as review evidence
	reviewTails  = 20   // slots of the review queue whose last output tail is read (each up to store.MaxKeyResult)
	leaseScan    = 200  // a task's newest entries read for a lease's attempt the running list left out
	leaseReads   = 20   // leases per request whose attempt is read so (the others' figures are not shown)
)

// Status of a task on the overview: a colour and a text label per value.
const (
	statusRunning = "running"
	statusGone    = "gone" // an attempt still recorded as running whose holder's lease is gone
	statusReview  = "review"
	statusOK      = "ok"
	statusFailed  = "failed"
	statusUnknown = "unknown"
	statusNever   = "never"
)

// TaskRow is one task on the overview.
type TaskRow struct {
	Task        string         `json:"task"`
	Status      string         `json:"status"`
	Last        *store.Attempt `json:"last,omitempty"`
	LastSuccess *time.Time     `json:"last_success,omitempty"`
	// LastSuccessUnknown says LastSuccess is not known: none of the task's newest NoSuccessIn
	// attempts succeeded, and its older ones are not read (store.SuccessScan: a task's row costs
	// the same whatever its history). NoSuccessIn may be 0 on a key-value store whose newest
	// 4,000 entries are all events. Neither and no LastSuccess: the task never succeeded.
	LastSuccessUnknown bool         `json:"last_success_unknown,omitempty"`
	NoSuccessIn        int          `json:"no_success_in,omitempty"`
	Lease              *store.Lease `json:"lease,omitempty"`
	Waiting            int          `json:"waiting"`
	// Durations are the seconds of the newest ended attempts (up to 10), oldest first.
	Durations []float64  `json:"durations"`
	Next      *time.Time `json:"next,omitempty"` // the next fire time, when a daemon job runs it
	// Gone are the task's attempts still recorded as running whose holder's lease is gone (the
	// holder died or was cut off), with the resolve commands when once resolve settles them now.
	Gone []Running `json:"gone,omitempty"`
}

// TaskPage is a page of the overview.
type TaskPage struct {
	Tasks []TaskRow `json:"tasks"`
	// Next is the after= of the next page, "" on the last.
	Next string `json:"next"`
	// Running is what the store lists of the attempts still running (every task's, not only this
	// page's: Running.Running holds them; each task's row holds its own whose holder is gone).
	Running RunningSection `json:"running"`
}

// tasks reads a page of the overview: the task names after `after`, then per task one short
// history read and, when no success is in it, one read of its last success among its newest
// store.SuccessScan attempts (store.ReadLastSuccess, kept while the task's newest entries stay as
// they were: lastsuccess.go); for the page, the attempts running (s.running:
// one Leases, the list again when a holder is gone, at most store.MaxRunningList) and one
// Waiting call.
func (s *Server) tasks(ctx context.Context, after string, limit int) (TaskPage, error) {
	names, err := store.ListTasks(ctx, s.c.Store, after, limit+1)
	if err != nil {
		return TaskPage{}, err
	}
	var p TaskPage
	if len(names) > limit {
		names, p.Next = names[:limit], names[limit-1]
	}
	var leases []store.Lease
	if p.Running, leases, err = s.running(ctx); err != nil {
		// The task table does without the list: a note says why, and the leases come alone.
		if ctx.Err() != nil {
			return TaskPage{}, err
		}
		s.c.Log.Warn("the overview: cannot list the attempts running", "err", err)
		p.Running = RunningSection{Running: []Running{}, Unlisted: []string{}, Listed: true, Error: err.Error()}
		if leases, err = s.c.Store.Leases(ctx); err != nil {
			return TaskPage{}, err
		}
	}
	gone := map[string][]Running{}
	for _, r := range p.Running.Running {
		if r.Lease == store.LeaseGone {
			gone[r.Task] = append(gone[r.Task], r)
		}
	}
	held := map[string]store.Lease{}
	for _, l := range leases {
		held[l.Task] = l
	}
	waiting, err := s.c.Store.Waiting(ctx)
	if err != nil {
		return TaskPage{}, err
	}
	waits := map[string]int{}
	for _, w := range waiting {
		waits[w.Task]++
	}
	next := s.nextFires(ctx)
	// A kept last success needs every attempt running listed (lastsuccess.go).
	listed := p.Running.Error == "" && p.Running.Listed && !p.Running.More
	unlisted := map[string]bool{}
	for _, t := range p.Running.Unlisted {
		unlisted[t] = true
	}
	p.Tasks = make([]TaskRow, 0, len(names))
	for _, name := range names {
		_, leased := held[name]
		row, err := s.taskRow(ctx, name, listed && !leased && len(gone[name]) == 0 && !unlisted[name])
		if err != nil {
			return TaskPage{}, err
		}
		if l, ok := held[name]; ok {
			row.Lease = &l
		}
		row.Waiting = waits[name]
		row.Gone = gone[name]
		if t, ok := next[name]; ok {
			row.Next = &t
		}
		row.Status = status(row)
		p.Tasks = append(p.Tasks, row)
	}
	return p, nil
}

// taskRow reads a task's row but its lease, waiting slots, attempts gone and next fire. With cache
// it may show a last success kept from an earlier read (s.success).
func (s *Server) taskRow(ctx context.Context, name string, cache bool) (TaskRow, error) {
	row := TaskRow{Task: name, Durations: []float64{}}
	es, err := s.c.Store.History(ctx, store.HistoryQuery{Task: name, Limit: 2 * trendLen})
	if err != nil {
		return row, err
	}
	for i := range es {
		a := es[i].Attempt
		if !a.State.IsAttempt() {
			continue
		}
		if row.Last == nil {
			row.Last = &a
		}
		if a.EndedAt != nil && len(row.Durations) < trendLen {
			row.Durations = append(row.Durations, a.EndedAt.Sub(a.StartedAt).Seconds())
		}
	}
	for i, j := 0, len(row.Durations)-1; i < j; i, j = i+1, j-1 {
		row.Durations[i], row.Durations[j] = row.Durations[j], row.Durations[i]
	}
	for i := range es { // newest first: the page's newest success is the task's
		if es[i].State == store.Succeeded {
			row.LastSuccess = es[i].EndedAt
			return row, nil
		}
	}
	ls, err := s.success.lastSuccess(ctx, s.c.Store, name, es, cache)
	if err != nil {
		return row, err
	}
	if ls.Attempt != nil {
		row.LastSuccess = ls.Attempt.EndedAt
	}
	if ls.Unknown {
		row.LastSuccessUnknown, row.NoSuccessIn = true, ls.Looked
	}
	return row, nil
}

// status is a task's status: a person's resolution of its last attempt counts as that attempt's
// outcome (an unknown attempt resolved as succeeded is done, not unknown).
func status(r TaskRow) string {
	switch {
	case r.Lease != nil:
		return statusRunning
	case len(r.Gone) > 0:
		return statusGone
	case r.Waiting > 0:
		return statusReview
	case r.Last == nil:
		return statusNever
	case r.Last.Resolution != nil && r.Last.Resolution.As == store.Succeeded:
		return statusOK
	case r.Last.Resolution != nil && r.Last.Resolution.As == store.Failed:
		return statusFailed
	case r.Last.State == store.Succeeded:
		return statusOK
	case r.Last.State == store.Failed:
		return statusFailed
	}
	return statusUnknown
}

// nextFires is each daemon job's next fire time (none without jobs), from the jobs alone: the
// overview reads nothing of the store per job.
func (s *Server) nextFires(context.Context) map[string]time.Time {
	out := map[string]time.Time{}
	if s.c.Jobs == nil {
		return out
	}
	now := s.c.Now()
	for _, j := range s.c.Jobs() {
		if next := scheduler.NextFires(j, now, 1); len(next) > 0 {
			out[j.Name] = next[0]
		}
	}
	return out
}

// HistoryFilter selects history for the API and the pages.
type HistoryFilter struct {
	store.HistoryQuery
	Holder   string
	Attempts bool // attempts only (no events), when Kind is ""
	Events   bool // events only, when Kind is ""
	From, To time.Time
}

// HistoryPage is a page of history. Next is the before= of the next page ("" at the end); a
// filter that the store cannot apply (holder, attempts or events only) or cannot search by an
// index (an attempt state; an event kind with a task) reads at most maxScan entries per page, so a
// page may hold fewer than asked and still have a Next.
type HistoryPage struct {
	Entries []store.Entry `json:"entries"`
	Next    string        `json:"next"`
}

var errStop = errors.New("stop")

func (s *Server) history(ctx context.Context, f HistoryFilter) (HistoryPage, error) {
	q := f.HistoryQuery
	limit := q.Limit
	q.Limit = maxScan
	if searchable := q.Kind.IsEvent() && q.Task == "" && q.Slot == ""; q.Kind != "" && !searchable {
		// A kind the store reads by walking the task's (or the whole) history past the entries of
		// other kinds (an attempt state; an event kind within a task): filtered here, within
		// maxScan entries a page, so that a page of a task failing for months costs a page.
		q.Kind = ""
	}
	if q.Before == "" && !f.To.IsZero() {
		q.Before = timeCursor(f.To)
	}
	if q.After != "" {
		return s.historyAfter(ctx, f, q, limit)
	}
	p := HistoryPage{Entries: []store.Entry{}}
	scanned, last := 0, ""
	err := store.EachHistory(ctx, s.c.Store, q, func(e store.Entry) error {
		if !f.From.IsZero() && e.StartedAt.Before(f.From) {
			last = ""
			return errStop
		}
		scanned++
		last = e.Cursor
		if f.keeps(e) {
			p.Entries = append(p.Entries, e)
		}
		if len(p.Entries) == limit || scanned == maxScan {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return HistoryPage{}, err
	}
	if errors.Is(err, errStop) {
		p.Next = last
	}
	return p, nil
}

// historyAfter is a page after q.After (towards newer entries): the store's maxScan entries
// nearest the cursor (newest first), filtered from the nearest on, so that the page holds the
// limit entries nearest the cursor, newest first, as the store's own page after it. Next is the
// nearest entry's cursor when the page was cut (as for a page read before: its oldest entry).
func (s *Server) historyAfter(ctx context.Context, f HistoryFilter, q store.HistoryQuery, limit int) (HistoryPage, error) {
	es, err := s.c.Store.History(ctx, q)
	if err != nil {
		return HistoryPage{}, err
	}
	p := HistoryPage{Entries: []store.Entry{}}
	cut := len(es) == q.Limit
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		if !f.From.IsZero() && e.StartedAt.Before(f.From) {
			continue
		}
		if f.keeps(e) {
			p.Entries = append(p.Entries, e)
		}
		if len(p.Entries) == limit {
			cut = true
			break
		}
	}
	slices.Reverse(p.Entries)
	if cut && len(es) > 0 {
		p.Next = es[len(es)-1].Cursor
	}
	return p, nil
}

func (f HistoryFilter) keeps(e store.Entry) bool {
	switch {
	case f.Kind != "" && e.State != f.Kind:
		return false
	case f.Holder != "" && e.Holder != f.Holder:
		return false
	case f.Kind == "" && f.Attempts && !e.State.IsAttempt():
		return false
	case f.Kind == "" && f.Events && !e.State.IsEvent():
		return false
	}
	return true
}

// timeCursor is the history position just after t (newer than every entry at t): a page read
// before it starts at t.
func timeCursor(t time.Time) string {
	return store.CursorOf(t.Add(time.Microsecond), true, "", 0).String()
}

// Review is a slot waiting for a person, with its evidence.
type Review struct {
	store.SlotState
	// Lease is the task's lease held now (an attempt running in another slot), nil when none.
	Lease *store.Lease `json:"lease,omitempty"`
	// History is the slot's newest entries: its attempts and events.
	History []store.Entry `json:"history"`
	// Tail is the end of the last attempt's output (the daemon keeps it), "" when none, read for
	// the first reviewTails of the queue only (TailNotRead for the others: the slot's run detail
	// shows it): a tail is up to 512 KiB, and the queue 500 slots.
	Tail        string `json:"tail,omitempty"`
	TailNotRead bool   `json:"tail_not_read,omitempty"`
}

// reviews reads the review queue: Waiting, then per slot a short history read and its output tail.
func (s *Server) reviews(ctx context.Context, limit int) ([]Review, int, error) {
	waiting, err := s.c.Store.Waiting(ctx)
	if err != nil {
		return nil, 0, err
	}
	total := len(waiting)
	if len(waiting) > limit {
		waiting = waiting[:limit]
	}
	leases, err := s.c.Store.Leases(ctx)
	if err != nil {
		return nil, 0, err
	}
	out := make([]Review, 0, len(waiting))
	for _, w := range waiting {
		r := Review{SlotState: w}
		for _, l := range leases {
			if l.Task == w.Task {
				r.Lease = &l
			}
		}
		if r.History, err = s.slotHistory(ctx, w.Task, w.Slot, reviewEvents); err != nil {
			return nil, 0, err
		}
		switch {
		case w.Last == nil:
		case len(out) < reviewTails:
			r.Tail = s.tail(ctx, w.Last.RunID)
		default:
			r.TailNotRead = true
		}
		out = append(out, r)
	}
	return out, total, nil
}

// tail is a run's output tail, "" when none is kept (or it cannot be read: evidence is shown
// when there is some, and its absence is not an error).
func (s *Server) tail(ctx context.Context, runID string) string {
	if _, ok := s.c.Store.(store.Keys); !ok || runID == "" {
		return ""
	}
	b, _, err := scheduler.Tail(ctx, s.c.Store, runID)
	if err != nil {
		return ""
	}
	return string(b)
}

// LeaseRow is a lease held now with its running attempt's figures.
type LeaseRow struct {
	store.Lease
	Slot     string `json:"slot"`
	Attempt  int    `json:"attempt"`
	Records  int64  `json:"records"`
	Progress string `json:"progress,omitempty"`
	// Done and Total are Progress read as DONE/TOTAL (Total 0 when it is not).
	Done       float64 `json:"done"`
	Total      float64 `json:"total"` // 0 when Progress is not DONE/TOTAL
	Checkpoint string  `json:"checkpoint,omitempty"`
	// Unread is true when the running list left the attempt out and more than leaseReads such
	// leases were held: its figures were not read this time (slot, attempt and progress empty).
	Unread bool `json:"unread,omitempty"`
}

// leases reads the leases held with their running attempts: the attempts from store.ReadRunning
// (the store's index of running attempts: one read for every lease, never history), and an
// attempt it does not list (a store without that index, more running than it lists) from the
// newest leaseScan entries of its task, for at most leaseReads leases a request (in task order;
// the others are shown without their figures: Unread), so that the leases page, which polls every
// second, costs a bounded read when the list cannot be read and a thousand leases are held. (A
// read of the task's running attempts, kind=running, walked its whole history when fewer than it
// asked for were running: one a lease, usually.)
func (s *Server) leases(ctx context.Context) ([]LeaseRow, error) {
	rr, ls, err := store.ReadRunning(ctx, s.c.Store, store.MaxRunningList)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		s.c.Log.Warn("the leases: cannot list the attempts running", "err", err)
		if ls, err = s.c.Store.Leases(ctx); err != nil {
			return nil, err
		}
	}
	running := map[string]store.Attempt{}
	for _, r := range rr.Attempts {
		running[r.Task+"\x00"+r.RunID] = r.Attempt
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].Task < ls[j].Task })
	out := make([]LeaseRow, 0, len(ls))
	reads := 0
	for _, l := range ls {
		row := LeaseRow{Lease: l}
		a, ok := running[l.Task+"\x00"+l.RunID]
		switch {
		case ok:
		case reads < leaseReads:
			reads++
			if a, ok, err = s.leaseAttempt(ctx, l); err != nil {
				return nil, err
			}
		default:
			row.Unread = true
		}
		if ok {
			row.Slot, row.Attempt, row.Records, row.Progress, row.Checkpoint = a.Slot, a.Number, a.Records, a.Progress, a.Checkpoint
			row.Done, row.Total = progress(a.Progress)
		}
		out = append(out, row)
	}
	return out, nil
}

// leaseAttempt finds l's running attempt among its task's newest leaseScan entries.
func (s *Server) leaseAttempt(ctx context.Context, l store.Lease) (store.Attempt, bool, error) {
	es, err := s.c.Store.History(ctx, store.HistoryQuery{Task: l.Task, Limit: leaseScan})
	if err != nil {
		return store.Attempt{}, false, err
	}
	for _, e := range es {
		if e.State == store.Running && e.RunID == l.RunID {
			return e.Attempt, true, nil
		}
	}
	return store.Attempt{}, false, nil
}
