package metrics

import (
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-run/once/store"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// The metrics, documented in docs/metrics.md.
var (
	descLastSuccess = desc("once_task_last_success_timestamp_seconds",
		"When the task's latest succeeded attempt ended (Unix seconds).", "task")
	descLastState = desc("once_task_last_attempt_state",
		"The state of the task's latest attempt: 1 for its state, 0 for the others (running, succeeded, failed, unknown).", "task", "state")
	descLastAttempt = desc("once_task_last_attempt_timestamp_seconds",
		"When the task's latest attempt started (Unix seconds).", "task")
	descWaiting = desc("once_task_waiting_review_slots",
		"Slots of the task waiting for a person (once resolve).", "task")
	descLeaseHeld = desc("once_task_lease_held",
		"1 while the task's lease is held, else 0.", "task")
	descLeaseInfo = desc("once_task_lease_info",
		"1 for the holder of a held lease (no series when the lease is free).", "task", "holder")
	descLeaseExpires = desc("once_task_lease_expires_timestamp_seconds",
		"When the task's held lease expires unless renewed, by the store's clock (Unix seconds).", "task")
	descAttempts = desc("once_attempts_total",
		"Attempts that ended since the collector started, by final state.", "task", "state")
	descDuration = desc("once_attempt_duration_seconds",
		"Duration of the attempts counted in once_attempts_total (start to end, by the store's clocks).", "task")
	descEvents = desc("once_events_total",
		"Events recorded since the collector started, by kind (busy, skipped, review, missed).", "task", "kind")
	descTasks = desc("once_tasks",
		"Tasks exported.")
	descLeftOut = desc("once_tasks_left_out",
		"Tasks seen but not exported because MaxTasks were already (a lower bound past a million).")
	descStoreUp = desc("once_store_up",
		"1 when every read of the store in the last refresh worked, else 0.")
	descReadDuration = desc("once_store_read_duration_seconds",
		"How long the last refresh's reads of the store took.")
	descScrapeDuration = desc("once_scrape_duration_seconds",
		"How long this scrape of the collector took, its reads of the store included.")

	descDaemonJobs    = desc("once_daemon_jobs", "Jobs the daemon node has loaded.")
	descDaemonRunning = desc("once_daemon_running", "Launches in progress on the daemon node.")
	descDaemonFired   = desc("once_daemon_fired_total", "Slots the daemon node fired (launched, or handled by the overlap policy).")
	descDaemonRefused = desc("once_daemon_refused_total", "Fires the daemon node refused because its clock was off.")
	descDaemonMissed  = desc("once_daemon_missed_total", "Missed slots the daemon node recorded.")
	descDaemonReload  = desc("once_daemon_reload_failures_total", "Reloads of the jobs file the daemon node refused.")
	descClockOffset   = desc("once_daemon_clock_offset_seconds", "The store's clock minus the daemon node's, last measured.")
	descClockOK       = desc("once_daemon_clock_ok", "1 while the daemon node's clock offset is within its maximum, else 0.")
	descJobNext       = desc("once_daemon_job_next_fire_timestamp_seconds", "When the job's next slot fires (Unix seconds).", "job")
	descJobLag        = desc("once_daemon_job_fire_lag_seconds", "The lag of the job's last fire on this node: launch time minus slot time.", "job")

	allDescs = []*prometheus.Desc{descLastSuccess, descLastState, descLastAttempt, descWaiting, descLeaseHeld,
		descLeaseInfo, descLeaseExpires, descAttempts, descDuration, descEvents, descTasks, descLeftOut,
		descStoreUp, descReadDuration, descScrapeDuration,
		descDaemonJobs, descDaemonRunning, descDaemonFired, descDaemonRefused, descDaemonMissed, descDaemonReload,
		descClockOffset, descClockOK, descJobNext, descJobLag}
)

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectTasks sends the per-task series and the task counts.
func (c *Collector) collectTasks(ch chan<- prometheus.Metric) {
	t := c.t
	for name, tk := range t.tasks {
		collectTask(ch, name, tk)
	}
	ch <- gauge(descTasks, float64(len(t.tasks)))
	ch <- gauge(descLeftOut, float64(len(t.leftOut)))
}

func collectTask(ch chan<- prometheus.Metric, name string, tk *task) {
	if !tk.success.IsZero() {
		ch <- gauge(descLastSuccess, unix(tk.success), name)
	}
	if l := tk.last; l != nil {
		for _, st := range store.AttemptStates {
			ch <- gauge(descLastState, bool01(l.state == st), name, string(st))
		}
		ch <- gauge(descLastAttempt, unix(l.started), name)
	}
	ch <- gauge(descWaiting, float64(tk.waiting), name)
	ch <- gauge(descLeaseHeld, bool01(tk.lease != nil), name)
	if l := tk.lease; l != nil {
		ch <- gauge(descLeaseInfo, 1, name, l.Holder)
		ch <- gauge(descLeaseExpires, unix(l.Expires), name)
	}
	for i, st := range endedStates {
		ch <- counter(descAttempts, float64(tk.attempts[i]), name, string(st))
	}
	for i, k := range eventKinds {
		ch <- counter(descEvents, float64(tk.events[i]), name, string(k))
	}
	buckets := make(map[float64]uint64, len(durationBuckets))
	for i, ub := range durationBuckets {
		if tk.buckets != nil {
			buckets[ub] = tk.buckets[i]
		} else {
			buckets[ub] = 0
		}
	}
	ch <- prometheus.MustNewConstHistogram(descDuration, tk.n, tk.sum, buckets, name)
}

// collectFleet sends a daemon node's series; at most max jobs, by name.
func collectFleet(ch chan<- prometheus.Metric, f Fleet, max int) {
	ch <- gauge(descDaemonJobs, float64(f.Jobs))
	ch <- gauge(descDaemonRunning, float64(f.Running))
	ch <- counter(descDaemonFired, float64(f.Fired))
	ch <- counter(descDaemonRefused, float64(f.Refused))
	ch <- counter(descDaemonMissed, float64(f.Missed))
	ch <- counter(descDaemonReload, float64(f.ReloadFailures))
	ch <- gauge(descClockOffset, f.ClockOffset.Seconds())
	ch <- gauge(descClockOK, bool01(f.ClockOK))
	jobs := append([]JobStats(nil), f.PerJob...)
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].Job < jobs[j].Job })
	seen := map[string]bool{}
	for _, j := range jobs {
		if len(seen) >= max || seen[j.Job] {
			continue
		}
		seen[j.Job] = true
		if !j.NextFire.IsZero() {
			ch <- gauge(descJobNext, unix(j.NextFire), j.Job)
		}
		if !j.LastFire.IsZero() {
			ch <- gauge(descJobLag, j.FireLag.Seconds(), j.Job)
		}
	}
}

func unix(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }
