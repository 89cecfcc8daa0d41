// Package store is the contract between once and the places it keeps leases and its run ledger.
//
// A Store is two things behind one connection:
//
//   - a Leaser: one lease per task, with a time-to-live measured by the store's own clock, a holder
//     identity and a fencing token that strictly increases per task across holders and restarts;
//   - a Ledger: the attempts made for each (task, slot), their states and legal transitions, the events
//     (skipped, busy, review, missed) and people's resolutions, with the figures and checkpoints runs report.
//
// Ledger writes made on behalf of a run are fenced: they carry the run's lease token and the store
// refuses them (ErrNotHeld) once a later token has been issued for the task. A paused or partitioned
// holder therefore cannot record anything after it has been replaced. Seats (AcquireRequest.Limit,
// up to N holders at once, each with its own token) are fenced each to its own token instead.
//
// # Adding a backend
//
//  1. Create package store/<name>; implement Store; add `var _ store.Store = (*Store)(nil)`.
//  2. Register an Opener for your DSN scheme(s) in init() with Register.
//  3. Take time only from the store's clock for lease expiry; never from the caller.
//  4. Map your client's errors to the sentinels below in one function.
//  5. Run storetest.Run from a test in your package against a real server, and document the DSN
//     parameters and the durability you give in docs/stores/<name>.md.
package store

import (
	"context"
	"time"
)

// Store is a Leaser and a Ledger behind one connection. Implementations are safe for concurrent use.
type Store interface {
	Leaser
	Ledger
	// Close releases the connection. Leases are not released by Close. Closing again returns nil;
	// every call on a closed store fails with ErrUnavailable.
	Close() error
}

// AcquireRequest asks for a task's lease.
type AcquireRequest struct {
	Task   string
	Holder string        // who asks: shown in status and history
	RunID  string        // the run the lease is for, shown in status
	TTL    time.Duration // measured by the store's clock; at least 1ms
	// Replace takes the lease over from a live holder instead of failing busy (once run
	// --replace): see Leaser.
	Replace bool
	// Limit, when 2 or more, grants one of Limit seats of the task instead of the exclusive lease
	// (once run --limit): see Leaser. 0 and 1 mean exclusive.
	Limit int
}

// Lease is a grant of a task's lease. Times are by the store's clock.
type Lease struct {
	Task     string    `json:"task"`
	Holder   string    `json:"holder"`
	RunID    string    `json:"run_id"`
	Token    int64     `json:"token"`
	Acquired time.Time `json:"acquired"`
	Expires  time.Time `json:"expires"`
	// Replaced is the live grant an Acquire with Replace took over, as it stood at that moment
	// (its Expires the latest it ever had), or nil when the lease was free. Acquired and
	// Replaced.Expires are by the same clock: Replaced.Expires.Sub(Acquired) is how long the
	// replaced holder may still believe it holds the lease.
	Replaced *Replacement `json:"replaced,omitempty"`
	// Limit is the request's Limit when the grant is a seat (2 or more), 0 for the exclusive
	// lease. Renew and Release go by it: keep it as Acquire returned it.
	Limit int `json:"limit,omitempty"`
}

// Replacement is what a replacing Acquire ended (Lease.Replaced): the grant it took over, its
// Expires the latest any grant it ended could still believe in, and the tokens of every live
// grant it ended — that grant's alone, or, when live seats held the task, every live seat's (never
// an expired or released one's). Over seats, Lease's holder and token may be a seat's that had
// already ended (a store that keeps a summary of its seats names the latest). A caller waits until
// Expires and settles the attempts begun under Tokens, and only those, as replaced.
type Replacement struct {
	Lease
	Tokens []int64 `json:"tokens"`
}

// ShortGrant is the most an Acquire's grant may fall short of the TTL asked (see Leaser); the
// lease package counts the grant's life from the request's send time by the shorter of the two.
const ShortGrant = 25 * time.Millisecond

// Leaser grants, renews and releases per-task leases.
//
// Contract:
//   - Acquire succeeds only when the task has no lease or its lease has expired by the store's clock;
//     otherwise it fails with a *BusyError (errors.Is(err, ErrBusy)) naming the current holder. A holder
//     string is not an identity proof: a second Acquire by the same holder is busy too.
//   - With req.Replace, Acquire also succeeds when the lease is held by a live grant, or by live
//     seats: the old grant ends — every seat, when seats held the task — and the new one is
//     returned with Replaced set to it (the seat that lasts longest) and Replaced.Tokens to the
//     tokens of every live grant it ended (storetest's LeaseReplaceEndsEverySeat). The old grant's Renew,
//     Release and ledger writes fail with ErrNotHeld, and a LossNotifier's channel for it closes,
//     from the write that ends it on: a store whose takeover takes more than one write ends the
//     old grant and its fence in the first (storetest's LeaseReplaceFencesAtOnce). Otherwise a
//     holder that saw its loss could record its attempt before the replacing holder's Abandon.
//     The store does not wait: the old holder may run until Replaced.Expires (it stops its work
//     before then, lease package), so a replacing caller must wait that long before it starts.
//   - Every successful Acquire returns a token strictly greater than every token issued before for the
//     task, across holders, releases and store restarts. Renew keeps the token.
//   - Renew and Release succeed only for the current grant (same task, holder and token) and, for
//     Renew, only while it has not expired; otherwise ErrNotHeld and the stored lease is unchanged.
//   - Release of an expired grant that nobody has taken over succeeds (it is still the latest token).
//   - With req.Limit N >= 2 (a seat), Acquire succeeds while fewer than N unexpired seats of the
//     task exist and no unexpired exclusive grant does; otherwise *BusyError naming one holder. An
//     exclusive Acquire is busy while any seat is unexpired. Seats take their tokens from the
//     task's one counter (strictly increasing, as above), each holder its own; Renew and Release
//     of a seat go by (task, holder, token) like the exclusive grant's. Replace with Limit is
//     refused. A store that cannot grant seats refuses Limit >= 2 with ErrUnsupported.
//   - Leases lists the grants that have not expired, by task (every seat of a task).
//   - A grant lasts its TTL (rounded up to the store's granularity) from when the request was sent,
//     by the store's clock; an Acquire's may last up to ShortGrant less, and its Expires - Acquired
//     then says how long (etcd uses an etcd lease renewed moments before as it is). Never more than
//     the store can vouch for, whatever the client's wall clock does.
type Leaser interface {
	Acquire(ctx context.Context, req AcquireRequest) (Lease, error)
	Renew(ctx context.Context, l Lease, ttl time.Duration) (Lease, error)
	Release(ctx context.Context, l Lease) error
	Leases(ctx context.Context) ([]Lease, error)
}

// SessionLeases is implemented by stores whose grants end with the client's session (ZooKeeper's
// ephemeral nodes): a grant outlives its holder only while the connection lives. The guard cannot
// leave such a grant to expire after the process ends (a stop during --min-hold); it says so.
type SessionLeases interface {
	LeasesEndWithSession() bool
}

// LossNotifier is implemented by stores whose server tells the client when a lease is gone (an etcd
// lease's keep-alive channel closing, a ZooKeeper session expiring). The returned channel is closed
// when the grant is lost for good. Stores without it are watched through Renew alone.
type LossNotifier interface {
	Lost(l Lease) <-chan struct{}
}

// Clock is implemented by stores that can tell the time by their own clock (doctor's clock offset).
type Clock interface {
	Now(ctx context.Context) (time.Time, error)
}

// State is the state of an attempt, or the kind of an event, in history.
type State string

// Attempt states. A slot's attempt moves running → succeeded | failed | unknown (by its own run;
// unknown when it stopped its work because it lost the lease) or running → unknown (when a later
// lease holder finds its holder gone). Nothing else is legal.
const (
	Running   State = "running"
	Succeeded State = "succeeded"
	Failed    State = "failed"
	Unknown   State = "unknown"
)

// Finishable reports whether a run may finish its attempt as st (Ledger.Finish): succeeded,
// failed, or unknown.
func (st State) Finishable() bool { return st == Succeeded || st == Failed || st == Unknown }

// Event kinds: things that happened without an attempt being made.
const (
	Skipped State = "skipped" // the slot had already succeeded (or --on-unknown skip)
	Busy    State = "busy"    // the lease (or the local lock) was held elsewhere
	Review  State = "review"  // the slot needs a person: unknown outcome or attempts used up
	// Missed: a scheduler (once daemon) found the slot's fire time passed while no node ran it,
	// outside its catch-up window; nothing ran and nothing will, unless a person backfills it.
	Missed State = "missed"
)

// Attempt is one try at a (task, slot). Slot is "" for tasks without slots.
type Attempt struct {
	Task       string      `json:"task"`
	Slot       string      `json:"slot"`
	RunID      string      `json:"run_id"`
	Number     int         `json:"attempt"`
	State      State       `json:"state"`
	Holder     string      `json:"holder"`
	Token      int64       `json:"token"`
	StartedAt  time.Time   `json:"started_at"`
	EndedAt    *time.Time  `json:"ended_at"`
	ExitCode   *int        `json:"exit_code"`
	Records    int64       `json:"records"`
	Progress   string      `json:"progress,omitempty"`   // "DONE/TOTAL" as reported
	Checkpoint string      `json:"checkpoint,omitempty"` // last checkpoint reported by this attempt
	Note       string      `json:"note"`
	Resolution *Resolution `json:"resolution,omitempty"`
	// Limit is the Limit of the seat the attempt runs under (AcquireRequest.Limit, 2 or more), 0
	// under the exclusive lease: attempts of seats may run at the same time (Concurrent), which
	// once doctor and the timeline then do not call an overlap. Begin records it as given.
	Limit int `json:"limit,omitempty"`
}

// Resolution is a person's decision on a slot that waited for review, attached to the slot's
// last attempt. As is Succeeded (treat the slot as done) or Failed (run it again, with a fresh
// attempt budget).
type Resolution struct {
	As   State     `json:"as"`
	By   string    `json:"by"`
	At   time.Time `json:"at"`
	Note string    `json:"note,omitempty"`
}

// Outcome finishes a running attempt.
type Outcome struct {
	State    State // Succeeded or Failed
	ExitCode *int
	Note     string // appended to any note reported during the run
}

// Report is what a running attempt tells about itself (once report). Zero fields are left as they are.
type Report struct {
	Records    *int64 // replaces the count
	Progress   string
	Checkpoint string
	Note       string
}

// Event is a skip, busy, review or missed decision, kept in history.
type Event struct {
	Task    string
	Slot    string
	Kind    State // one of EventKinds: Skipped, Busy, Review or Missed
	RunID   string
	Holder  string
	Token   int64 // 0 when no lease was held
	Attempt int   // the attempt the event is about, 0 when none
	Note    string
}

// SlotState is what the ledger knows about one slot, enough to decide whether to run it.
type SlotState struct {
	Task string `json:"task"`
	Slot string `json:"slot"`
	// Last is the latest attempt, nil when the slot was never tried.
	Last *Attempt `json:"last,omitempty"`
	// Failures counts failed or unknown attempts since the latest resolution (or since the start),
	// up to MaxFailures: a slot with more shows MaxFailures.
	Failures int `json:"failures"`
	// Checkpoint is the latest checkpoint reported by any attempt of the slot.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Waiting is true when the slot waits for a person: its last attempt is unknown and unresolved,
	// or a Review event was recorded for its last attempt and it is unresolved.
	Waiting bool `json:"waiting"`
}

// ResolveRequest is a person's decision (once resolve).
type ResolveRequest struct {
	Task, Slot string
	As         State // Succeeded or Failed
	By         string
	Note       string
}

// HistoryQuery selects history entries, newest first (the order of Cursor). Empty fields match
// everything; Limit 0 means no limit.
type HistoryQuery struct {
	Task  string
	Slot  string
	Limit int
	// Before keeps only the entries after this cursor in history order (older): the next page is
	// History with Before set to the Cursor of the last entry of this one.
	Before string
	// After keeps only the entries before this cursor in history order (newer). With Limit, the
	// page is the Limit entries nearest to it — the previous page — still listed newest first.
	After string
	// Kind keeps only the entries of this kind: an attempt state (AttemptStates) or an event kind
	// (EventKinds); "" keeps all. Another value is refused with ErrInvalid (CheckKind). Pages and
	// cursors work as without it: a cursor of a filtered page pages on through the same filter.
	Kind State
}

// Entry is one line of history: an attempt (State running/succeeded/failed/unknown) or an event
// (State skipped/busy/review/missed). For events StartedAt is when it happened and EndedAt is nil.
type Entry struct {
	Attempt
	// Cursor is the entry's position in history order, for HistoryQuery.Before and After. It is
	// valid for the store and prefix that gave it out.
	Cursor string `json:"cursor"`
}

// Ledger is the run ledger.
//
// Contract:
//   - Begin records a new running attempt a (a.Number = last attempt's number + 1, or 1). It fails with
//     ErrNotHeld unless a.Token is the task's latest lease token (or, for a seat, the token of a
//     seat of the task not cleared since — see Leaser), and with ErrConflict when the slot
//     already has an attempt numbered a.Number or a running attempt: two writers racing on one slot
//     never both record a running attempt. ErrConflict too when the slot's last attempt was resolved
//     as succeeded (a person marked the slot done after the run read it), but in the slot "" (a
//     task without slots: no memory, every run runs): a Begin and a Resolve racing on one slot
//     never both go through. The store sets StartedAt by its clock and returns
//     the attempt as stored.
//   - Finish moves the running attempt runID to o.State (succeeded, failed, or unknown: a run that
//     stopped its work because it lost the lease cannot say whether the work happened; ErrConflict
//     for other states). ErrNotHeld unless token is still the task's
//     latest lease token (or a current seat's, as for Begin) and the token the attempt began under; ErrConflict when the attempt is not running (e.g. already marked unknown);
//     ErrNotFound when there is no such attempt.
//   - Report attaches figures to the running attempt runID, fenced like Finish.
//   - Abandon marks every running attempt of task whose token is lower than token as unknown and
//     returns them, except those of unexpired seats; token must be fenced as for Begin (ErrNotHeld
//     otherwise).
//   - Resolve attaches a person's decision to the slot's last attempt when it is unknown or failed
//     and not yet resolved, and still the last when the decision is written (a Begin racing it
//     made a newer one: ErrConflict); ErrNotFound when the slot has no attempt, ErrConflict otherwise.
//   - Record keeps an event of one of EventKinds (ErrConflict for another kind, CheckEvent); events
//     are not fenced (a busy contender holds no lease). Only a review event can make a slot wait;
//     no event changes Slot's Last or Failures.
//   - Slot, History and Waiting read. Waiting lists the slots waiting for a person, oldest first:
//     by the time their last attempt ended (its start if it has no end), then by task, then by
//     slot. History lists entries in the order of Cursor; HistoryQuery.Before and After page
//     through it. Waiting costs the slots waiting, not the ledger; every store says in
//     docs/stores what a page of History costs.
//   - Prune removes old history that no decision needs, and nothing else. Among the attempts
//     that started and the events that happened before r.Before (of r.Task when set) it removes:
//     an attempt of a settled slot — its last attempt succeeded, or was resolved — unless it is
//     the slot's last attempt or the slot's latest attempt with a checkpoint; and an event, unless
//     it is a review event about its slot's last attempt while that attempt is unresolved (it
//     makes the slot wait). With r.ForgetSlots it also removes every attempt and event of a slot
//     that is done (last attempt succeeded or resolved as succeeded) and ended before r.Before.
//     So Prune never removes a running attempt, any attempt of a slot that is not settled (its
//     failures are its attempt budget), a slot's last attempt or its checkpoint (without
//     ForgetSlots), or what makes a slot wait; Slot's Last, Checkpoint and Waiting are as before,
//     and so is Failures for every slot that may run again. Leases are never touched. With
//     r.DryRun it only counts. Prune may run while runs write: it is safe at any moment.
type Ledger interface {
	Begin(ctx context.Context, a Attempt) (Attempt, error)
	Finish(ctx context.Context, runID string, token int64, o Outcome) (Attempt, error)
	Report(ctx context.Context, runID string, token int64, r Report) error
	Abandon(ctx context.Context, task string, token int64) ([]Attempt, error)
	Resolve(ctx context.Context, r ResolveRequest) (Attempt, error)
	Record(ctx context.Context, e Event) error
	Slot(ctx context.Context, task, slot string) (SlotState, error)
	History(ctx context.Context, q HistoryQuery) ([]Entry, error)
	Waiting(ctx context.Context) ([]SlotState, error)
	Prune(ctx context.Context, r PruneRequest) (PruneResult, error)
}
