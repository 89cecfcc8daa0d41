package metrics

import (
	"sort"
	"strconv"
	"time"

	"github.com/once-run/once/store"
)

func gaugeDesc(name, help string, labels ...string) *desc {
	return newDesc("gauge", name, help, labels...)
}
func counterDesc(name, help string, labels ...string) *desc {
	return newDesc("counter", name, help, labels...)
}

// The metrics, documented in docs/metrics.md.
var (
	descLastSuccess = gaugeDesc("once_task_last_success_timestamp_seconds",
		"When the task's latest succeeded attempt ended (Unix seconds).", "task")
	descSuccessUnknown = gaugeDesc("once_task_last_success_unknown",
		"1 while the task's latest success is not known: none of its newest "+strconv.Itoa(store.SuccessScan)+
			" attempts succeeded and its older ones were not read (no series otherwise).", "task")
	descLastState = gaugeDesc("once_task_last_attempt_state",
		"The state of the task's latest attempt, a person's decision on it (once resolve) counted as its outcome: 1 for its state, 0 for the others (running, succeeded, failed, unknown).", "task", "state")
	descLastAttempt = gaugeDesc("once_task_last_attempt_timestamp_seconds",
		"When the task's latest attempt started (Unix seconds).", "task")
	descWaiting = gaugeDesc("once_task_waiting_review_slots",
		"Slots of the task waiting for a person (once resolve).", "task")
	descGone = gaugeDesc("once_task_holder_gone_attempts",
		"Attempts of the task still recorded as running whose holder's lease is gone (the holder died or was cut off; once status, once resolve).", "task")
	descLeaseHeld = gaugeDesc("once_task_lease_held",
		"1 while the task's lease is held, else 0.", "task")
	descLeaseInfo = gaugeDesc("once_task_lease_info",
		"1 for each holder of the task's live grants: the lease's, or each seat's under --limit (the first 10 by name; no series when the lease is free).", "task", "holder")
	descLeaseExpires = gaugeDesc("once_task_lease_expires_timestamp_seconds",
		"When the task's held lease (of seats, the last to expire) expires unless renewed, by the store's clock (Unix seconds).", "task")
	descAttempts = counterDesc("once_attempts_total",
		"Attempts that ended since the collector started, by final state.", "task", "state")
	descDuration = newDesc("histogram", "once_attempt_duration_seconds",
		"Duration of the attempts counted in once_attempts_total (start to end, by the store's clocks).", "task")
	descEvents = counterDesc("once_events_total",
		"Events recorded since the collector started, by kind (busy, skipped, review, missed).", "task", "kind")
	descTasks = gaugeDesc("once_tasks",
		"Tasks exported.")
	descLeftOut = gaugeDesc("once_tasks_left_out",
		"Tasks seen but not exported because MaxTasks were already (a lower bound past a million).")
	descStoreUp = gaugeDesc("once_store_up",
		"1 when every read of the store in the last refresh worked, else 0.")
	descReadDuration = gaugeDesc("once_store_read_duration_seconds",
		"How long the last refresh's reads of the store took.")
	descScrapeDuration = gaugeDesc("once_scrape_duration_seconds",
		"How long this scrape of the collector took, its reads of the store included.")

	descDaemonJobs     = gaugeDesc("once_daemon_jobs", "Jobs the daemon node has loaded.")
	descDaemonRunning  = gaugeDesc("once_daemon_running", "Launches in progress on the daemon node.")
	descDaemonFired    = counterDesc("once_daemon_fired_total", "Slots the daemon node fired (launched, or handled by the overlap policy).")
	descDaemonRefused  = counterDesc("once_daemon_refused_total", "Fires the daemon node refused because its clock was off.")
	descDaemonMissed   = counterDesc("once_daemon_missed_total", "Missed slots the daemon node recorded.")
	descDaemonReload   = counterDesc("once_daemon_reload_failures_total", "Reloads of the jobs file the daemon node refused.")
	descDaemonDeferred = counterDesc("once_daemon_accounts_deferred_total", "Accounts of a job (its slots since its newest record) that a store error put off on the daemon node.")
	descDaemonWaiting  = gaugeDesc("once_daemon_accounts_waiting", "Jobs of the daemon node whose account a store error put off and none has worked since.")
	descClockOffset    = gaugeDesc("once_daemon_clock_offset_seconds", "The store's clock minus the daemon node's, last measured.")
	descClockOK        = gaugeDesc("once_daemon_clock_ok", "1 while the daemon node's clock offset is within its maximum, else 0.")
	descJobNext        = gaugeDesc("once_daemon_job_next_fire_timestamp_seconds", "When the job's next slot fires (Unix seconds).", "job")
	descJobLag         = gaugeDesc("once_daemon_job_fire_lag_seconds", "The lag of the job's last fire on this node: launch time minus slot time.", "job")

	// allDescs are once's own families (docs/metrics.md describes each).
	allDescs = []*desc{descLastSuccess, descSuccessUnknown, descLastState, descLastAttempt, descWaiting, descGone, descLeaseHeld,
		descLeaseInfo, descLeaseExpires, descAttempts, descDuration, descEvents, descTasks, descLeftOut,
		descStoreUp, descReadDuration, descScrapeDuration,
		descDaemonJobs, descDaemonRunning, descDaemonFired, descDaemonRefused, descDaemonMissed, descDaemonReload,
		descDaemonDeferred, descDaemonWaiting,
		descClockOffset, descClockOK, descJobNext, descJobLag}
)

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectTasks sends the per-task series and the task counts.
func (c *Collector) collectTasks(w *sink) {
	t := c.t
	for name, tk := range t.tasks {
		collectTask(w, name, tk)
	}
	w.gauge(descTasks, float64(len(t.tasks)))
	w.gauge(descLeftOut, float64(len(t.leftOut)))
}

func collectTask(w *sink, name string, tk *task) {
	if !tk.success.IsZero() {
		w.gauge(descLastSuccess, unixSec(tk.success), name)
	} else if tk.successUnknown {
		w.gauge(descSuccessUnknown, 1, name)
	}
	if l := tk.last; l != nil {
		for _, st := range store.AttemptStates {
			w.gauge(descLastState, bool01(l.shown() == st), name, string(st))
		}
		w.gauge(descLastAttempt, unixSec(l.started), name)
	}
	w.gauge(descWaiting, float64(tk.waiting), name)
	w.gauge(descGone, float64(tk.gone), name)
	w.gauge(descLeaseHeld, bool01(tk.lease != nil), name)
	if l := tk.lease; l != nil {
		for _, h := range tk.holders {
			w.gauge(descLeaseInfo, 1, name, h)
		}
		w.gauge(descLeaseExpires, unixSec(l.Expires), name)
	}
	for i, st := range endedStates {
		w.counter(descAttempts, float64(tk.attempts[i]), name, string(st))
	}
	for i, k := range eventKinds {
		w.counter(descEvents, float64(tk.events[i]), name, string(k))
	}
	buckets := tk.buckets
	if buckets == nil {
		buckets = make([]uint64, len(durationBuckets))
	}
	w.histogram(descDuration, tk.n, tk.sum, durationBuckets, buckets, name)
}

// collectFleet sends a daemon node's series; at most max jobs, by name.
func collectFleet(w *sink, f Fleet, max int) {
	w.gauge(descDaemonJobs, float64(f.Jobs))
	w.gauge(descDaemonRunning, float64(f.Running))
	w.counter(descDaemonFired, float64(f.Fired))
	w.counter(descDaemonRefused, float64(f.Refused))
	w.counter(descDaemonMissed, float64(f.Missed))
	w.counter(descDaemonReload, float64(f.ReloadFailures))
	w.counter(descDaemonDeferred, float64(f.AccountsDeferred))
	w.gauge(descDaemonWaiting, float64(f.AccountsWaiting))
	w.gauge(descClockOffset, f.ClockOffset.Seconds())
	w.gauge(descClockOK, bool01(f.ClockOK))
	jobs := append([]JobStats(nil), f.PerJob...)
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].Job < jobs[j].Job })
	seen := map[string]bool{}
	for _, j := range jobs {
		if len(seen) >= max || seen[j.Job] {
			continue
		}
		seen[j.Job] = true
		if !j.NextFire.IsZero() {
			w.gauge(descJobNext, unixSec(j.NextFire), j.Job)
		}
		if !j.LastFire.IsZero() {
			w.gauge(descJobLag, j.FireLag.Seconds(), j.Job)
		}
	}
}

func unixSec(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }
