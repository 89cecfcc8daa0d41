// Package scheduler is the fleet scheduler of once daemon: every node of a fleet runs a Scheduler
// with the same jobs on the same store, and each slot of each job runs at most once across the
// fleet. There is no consensus protocol of its own: every launch goes through the same guard as
// once run (package once: the local lock, the store's lease with its fencing token, the run
// ledger), so the store decides who runs a slot, exactly as it does between two once run.
//
// The model, per job and node:
//
//   - Firing. The node computes each slot's fire time with package slot (the slot's start, plus a
//     jitter that is the same on every node for that slot) on the store's clock where the store
//     has one (store.Clock), and launches the slot through the guard with once.Options.Untried
//     and Fleet: the first node to take the lease runs it; the others find it busy or already
//     tried and do nothing, record nothing and start no command. A node whose clock is off from
//     the store's by more than Config.MaxClockOffset refuses to fire and says so.
//   - Overlap. When a slot fires while this node still runs the job's previous one, the job's
//     overlap policy decides: skip (record a skipped event), buffer-one (run it right after; a
//     further one is skipped) or replace (stop the running one through its stop path, then run
//     the new one).
//   - Following up. A node that found a slot busy watches it: when the task's lease is no longer
//     held, it reads the slot once and acts on what it finds: a running attempt whose holder
//     vanished is taken over (the guard marks it unknown; the job's on-unknown policy decides), a
//     failed one is tried again after retry-backoff (while the slot is the current one), an
//     untried one that waited behind another (buffer-one, replace, catch-up) is run.
//   - Nothing lost. On start and after any gap (suspend, every node down), the slots that passed
//     since the newest slot the ledger knows run oldest first, once, when they lie in the job's
//     catch-up window (at most catch-up-max of them, the newest); older ones are recorded as
//     store.Missed events and announced (notify.Missed). A slot whose fire time passed only
//     moments ago is fired late instead. For a job whose slots can wait in a node's queue
//     (buffer-one, catch-up), the slots behind the newest one that have no record (a queue a
//     stopped node dropped) follow the same rules (holes.go).
//   - Control. Pause, Resume and Trigger keep their requests in the store's business keys
//     (store.Keys), so they hold for the whole fleet; each node reads them every Config.Poll.
//   - Output. Each attempt's output goes to a local file per job (rotated), and its tail is kept
//     in the store with the attempt, so that any node can show it (Tail).
//
// A program embeds a Scheduler with its own jobs (Job.Work runs a Go function instead of a
// command) and, if it runs commands, must run the supervision shim first thing in main, as package
// job says.
package scheduler
