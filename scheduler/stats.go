package scheduler

import (
	"sync/atomic"
	"time"
)

type statsCounters struct {
	fired, refused, missed, reloadFailures, accountsDeferred atomic.Int64
}

// Stats are a node's counters since it started, for status lines and metrics.
type Stats struct {
	Fired          int64 // slots fired (launched, or handled by the overlap policy)
	Refused        int64 // fires refused because this node's clock is off
	Missed         int64 // missed slots this node recorded
	ReloadFailures int64 // reloads refused (ReloadFailed)
	// AccountsDeferred counts the accounts a store error put off (each is tried again at a poll,
	// after a backoff, and before the job's next fire); AccountsWaiting is how many jobs have had
	// one put off and none work since (a retry in progress included, so that a gauge scraped
	// meanwhile does not drop to 0). A slot of such a job has no record until its account works.
	AccountsDeferred int64
	AccountsWaiting  int
	ClockOffset      time.Duration // the store's clock minus this node's, last measured
	ClockOK          bool          // the offset is within Config.MaxClockOffset
	Jobs             int
	Running          int // launches in progress on this node
	// PerJob is each job's dispatch figures, in the jobs' order.
	PerJob []JobStats
}

// JobStats is one job's dispatch figures on this node.
type JobStats struct {
	Name     string
	Next     time.Time     // when its next slot fires (jitter included); zero when none
	LastFire time.Time     // the fire time of the last slot the dispatcher handled; zero before
	LastLag  time.Duration // how long after LastFire the dispatcher handled it
	Running  bool          // a launch of it is in progress on this node
	Launches int           // how many launches of it are in progress on this node (up to its limit)
}

// Stats returns the node's counters now.
func (s *Scheduler) Stats() Stats {
	off, ok := s.clock.state()
	st := Stats{Fired: s.stats.fired.Load(), Refused: s.stats.refused.Load(), Missed: s.stats.missed.Load(),
		ReloadFailures: s.stats.reloadFailures.Load(), AccountsDeferred: s.stats.accountsDeferred.Load(), ClockOffset: off, ClockOK: ok}
	for _, js := range s.snapshot() {
		st.Jobs++
		js.mu.Lock()
		st.Running += len(js.actives)
		if js.retryBackoff > 0 { // put off by a store error, and no account has worked since
			st.AccountsWaiting++
		}
		j := JobStats{Name: js.job.Name, LastFire: js.lastFire, LastLag: js.lastLag, Running: len(js.actives) > 0,
			Launches: len(js.actives)}
		if js.next.Value != "" {
			j.Next = fireTime(js.job.Name, js.next, js.job.Jitter)
		}
		js.mu.Unlock()
		st.PerJob = append(st.PerJob, j)
	}
	return st
}

// ReloadFailed counts a reload the caller refused (a bad jobs file) in Stats.
func (s *Scheduler) ReloadFailed() { s.stats.reloadFailures.Add(1) }
