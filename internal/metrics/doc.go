// Package metrics exports once's state to Prometheus, read from the store: a Collector (New) and
// the handler to mount at /metrics (Collector.Handler), for once serve and once daemon --http.
// Every metric, its labels and example alert rules: docs/metrics.md.
//
// It imports only package store: a daemon's counters come in through the FleetStats interface, as
// a plain Fleet the daemon fills. It writes Prometheus' text format itself (expo.go) rather than
// through the Prometheus client library, whose package init ran in every once process (the tests
// parse what it writes with that library's parser and lint it with promlint).
//
// # What a scrape reads
//
// The gauges of now are read on every scrape (at most once per Config.MinInterval): the leases
// held (Leaser.Leases: the held leases) and the slots waiting for review (Ledger.Waiting: the
// slots waiting). Neither grows with history.
//
// The counters and the histogram (once_attempts_total, once_events_total,
// once_attempt_duration_seconds) would need the whole history if read from it, so they are kept
// in this process: each scrape tails history. It reads the entries newer than the newest one it
// has seen (HistoryQuery.After, pages of 1,000, at most 100,000 per scrape, a burst past that is
// read on by the next scrapes) and counts each entry once, by its identity: an event when it
// appears, an attempt when it has ended. A scrape therefore costs what was written since the last
// one, not the ledger, on the stores whose history pages come from an index (the SQL stores:
// store.HistoryPager); the key-value stores read their whole history for any page, as their
// docs/stores pages say.
//
// The reads are made on the scrape, not by a background poll: the collector has no goroutine to
// start or stop (New reads nothing, and there is no Close), a store nobody scrapes is not read,
// and a scrape's cost is bounded anyway (what is new, at most 100,000 entries, and 0.5 s of
// tasks' first reads). Config.MinInterval makes concurrent or repeated scrapes one read.
//
// # Counters start at zero
//
// The first scrape does not walk history: it reads the newest 10,000 entries (to find the tasks
// recently active and the attempts running) and counts nothing in them. The counters count what
// happens while the collector runs, from zero; a restart of the process starts them at zero again,
// which Prometheus' rate() and increase() treat as a counter reset, so increase(x[1h]) is right
// from the second sample after a start. An attempt that was running at the first scrape is counted
// when it ends.
//
// # Long attempts
//
// An entry's place in history is its attempt's start, so an attempt that started before the
// newest entry seen and ended after would be missed by a plain tail, which never reads that place
// again. The collector remembers the running attempts it has seen (in the tail, in the first
// scrape's window, and in each task's first read) and counts each when it ends, found in one of
// two ways:
//
//   - Each tail reads again the last 10 s before the newest entry seen (entries that land late: a
//     writer whose clock is behind, a commit after a later-dated one), so an attempt that ends
//     within 10 s of its start, or of a later entry, is seen ended there. When the newest entry is
//     dated after the collector's clock (Config.Now; a writer whose clock is ahead), the window
//     starts 10 s before the collector's now instead, but at most 5 minutes before that entry:
//     one clock ahead does not make the tail skip what the others write meanwhile, and a
//     collector whose own clock is behind re-reads a bounded window.
//   - Otherwise a running attempt is left alone while the grant it began under (its task's
//     lease, or any seat of a task of --limit N) is live and it is that grant's newest attempt:
//     its run is still going. When that grant is gone (expired, released, taken over), or its
//     holder has begun a later attempt under it (a sequence of slots), the collector reads its slot (Ledger.Slot: a few index searches), and, when a later
//     attempt has followed it, its own entry in the slot's history. An attempt still running
//     without its lease (its holder vanished; the next holder will mark it unknown) is read again
//     every 30 s, at most 200 such slots per scrape.
//
// This costs nothing per running attempt on a scrape while the runs hold their leases (one read of
// the leases, made anyway for once_task_lease_held), and one slot read when each ends, which a
// rescan of a bounded window could not give for runs longer than the window.
//
// # Tasks
//
// The tasks are found in the first scrape's window, in the leases held, the slots waiting, the
// tail, and, on a store that is a store.TaskLister, its index (every 5 minutes). At most
// Config.MaxTasks are exported, the first found, and none is dropped later, so series do not
// churn; once_tasks_left_out counts the others. A task's first read (at most 0.5 s of them per
// scrape, the others on the next scrapes) is its newest 100 entries, for its latest attempt and
// the attempts running, and, when no success is among them, its latest succeeded attempt among
// its newest 1,000 attempts (store.ReadLastSuccess: on the SQL stores one limited walk of the
// task's time index, elsewhere at most 4,000 entries of history; once per task and process), so
// that it costs the same whatever the task's history. When none of those succeeded and the task
// has older attempts, its once_task_last_success_timestamp_seconds is absent and
// once_task_last_success_unknown is 1 (not known; OnceNoRecentSuccess fires on it, so that the
// bound never silences the alert) until the tail sees a success. Without a TaskLister, a task
// neither active in the newest 10,000 entries, holding its lease, nor waiting appears when it next
// writes history.
//
// # When the store fails
//
// A read that fails makes once_store_up 0; the others are still made, and the scrape exports what
// the collector has: counters as counted, and gauges as last read. The tail goes on from where it
// stopped at the next scrape, so nothing is counted twice or lost (within the overlap above).
package metrics
