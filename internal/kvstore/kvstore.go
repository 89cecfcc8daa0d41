// Package kvstore is the code the key-value stores (Redis, etcd, ZooKeeper) share: the run ledger
// (Ledger, over a backend's KV) and business keys (Keys, over a backend's KeyKV).
//
// The ledger of one (task, slot) is one document (Doc): its attempts and events. Every transition
// is read → decide in Go → compare-and-set of that one document, fenced by the task's latest lease
// token in the same atomic write (an etcd transaction, a ZooKeeper multi, a Redis Lua script).
// A backend supplies the KV: load a document with a version, save it if the version (and the
// fence) still hold, map a run id to its slot, and list documents. Everything else — the legal
// transitions, failures, waiting, history order — lives here once.
package kvstore

import (
	"context"
	"errors"
	"time"

	"github.com/once-run/once/store"
)

// ErrStale is returned by KV.Save when the document changed since it was loaded. The ledger
// reloads and decides again.
var ErrStale = errors.New("kvstore: document changed since it was read")

// Version is a backend's opaque version of a loaded document (a mod revision, a znode version).
type Version = int64

// KV is what a backend provides. All methods return store sentinels (ErrUnavailable, ErrNotHeld)
// or ErrStale.
type KV interface {
	// Load returns the document of (task, slot) or nil when there is none, its version (meaningful
	// to Save only) and the time to stamp transitions with (the store's clock when it has one).
	Load(ctx context.Context, task, slot string) (*Doc, Version, time.Time, error)
	// Save writes d when its version is still ver (ver of a missing document means "create") and,
	// when token > 0, token is still a current grant of the task (Grants.Current; ErrNotHeld
	// otherwise), both checked in the same atomic write, and returns the document's new version.
	// When run is not empty it also records that run id belongs to (d.Task, d.Slot). A backend
	// with a running index (RunningKV) keeps it in the same write: the slot is in it exactly when
	// d.Runs().
	Save(ctx context.Context, d *Doc, ver Version, token int64, run string) (Version, error)
	// Run returns the task and slot run id began in; ErrNotFound when unknown.
	Run(ctx context.Context, runID string) (task, slot string, err error)
	// Grants returns task's current grants: its latest lease token (0 when none was ever issued)
	// and its seats.
	Grants(ctx context.Context, task string) (Grants, error)
	// Docs lists the documents of task, or of every task when task is "".
	Docs(ctx context.Context, task string) ([]*Doc, error)
	// Waiting lists the documents in the backend's index of waiting slots. Save keeps that index
	// in the same atomic write as the document: the document's slot is in it when d.Waits().
	// indexed is false when the index was never built (a ledger of an older once): the ledger
	// then builds it once with Index.
	Waiting(ctx context.Context) (docs []*Doc, indexed bool, err error)
	// Index adds the waiting documents of docs to the index and marks it built.
	Index(ctx context.Context, docs []*Doc) error
	// Delete removes the document (and its index entries) when its version is still ver.
	Delete(ctx context.Context, d *Doc, ver Version) error
	// Unrun removes run ids from the run index (their attempts were pruned). Best effort: a left
	// entry points at a slot without that attempt, which reads as ErrNotFound.
	Unrun(ctx context.Context, runs []string) error
}

// RunningKV is an optional KV capability: an index of the slots of each task whose document has
// a running attempt, kept by Save (and Delete) in the same atomic write as the document, as the
// waiting index is. With it Abandon, the first step of every run, reads the attempts left running
// instead of the task's whole history.
type RunningKV interface {
	// Running returns the documents of the slots in task's running index (an empty document for
	// a slot listed without one). indexed is false when the index was never built (a ledger an
	// older once wrote): the ledger then reads every document of the task as well, and calls
	// IndexRunning.
	Running(ctx context.Context, task string) (docs []*Doc, indexed bool, err error)
	// IndexRunning puts the slots of docs that have a running attempt in task's index and marks
	// the index built.
	IndexRunning(ctx context.Context, task string, docs []*Doc) error
}

// StartKV is a KV capability, with RunningKV, that the ledger's store.Starter (Ledger.Start) needs:
// the exclusive lease and a read of what the run decides from, in one step, most often one round
// trip.
type StartKV interface {
	RunningKV
	// AcquireRead is the store's Acquire of req (never a seat or a replacement) and, in the same
	// atomic step, a read of what Start needs: see Snapshot. A busy lease is the *store.BusyError
	// Acquire returns, and nothing is read.
	AcquireRead(ctx context.Context, req store.AcquireRequest, slot string) (store.Lease, Snapshot, error)
	// Release is the store's Release.
	Release(ctx context.Context, l store.Lease) error
}

// Snapshot is what AcquireRead read with the lease.
type Snapshot struct {
	Doc     *Doc      // the slot's document, nil when there is none
	Ver     Version   // its version
	Now     time.Time // the time to stamp transitions with, as Load returns it
	Running int       // how many slots the task's running index lists
	Indexed bool      // the task's running index was built (RunningKV)
}

// FinishKV is the KV capability that the ledger's store.Finisher (Ledger.FinishRelease) needs.
type FinishKV interface {
	// Release is the store's Release.
	Release(ctx context.Context, l store.Lease) error
	// SaveRelease is Save(ctx, d, ver, l.Token, "") and the store's Release(ctx, l) in one atomic
	// write: both or neither. l is never a seat. A token that is not the task's latest is
	// ErrNotHeld, as Save's and Release's would be.
	SaveRelease(ctx context.Context, d *Doc, ver Version, l store.Lease) (Version, error)
}

// Ledger implements store.Ledger over a KV. Make it with NewLedger, which gives it a memo of the
// documents this process read and wrote (memo.go); the zero value with a KV reads every time.
type Ledger struct {
	KV   KV
	memo *memo
}

// maxRetries bounds compare-and-set retries when writers race on one document.
const maxRetries = 64

// Grants are the grants of a task that fence its ledger writes: the latest token issued (the
// exclusive grant's, or the latest seat's) and the seats (store.AcquireRequest.Limit) that no
// exclusive grant has come after, each with whether it is unexpired by the store's clock. A
// backend keeps a seat here until a later seat acquire finds it expired, or an exclusive grant
// ends every seat.
type Grants struct {
	Latest int64
	Seats  map[int64]bool // seat token → live
}

// Current reports whether a write with token is fenced in: the latest token or a seat's.
func (g Grants) Current(token int64) bool {
	_, seat := g.Seats[token]
	return token > 0 && (token == g.Latest || seat)
}

// Live reports whether token is a live seat's: Abandon leaves that seat's running attempts alone.
func (g Grants) Live(token int64) bool { return g.Seats[token] }

// Backend is the ledger's KV, for tests that reach a backend's documents (kvtest).
func (l Ledger) Backend() KV { return l.KV }
