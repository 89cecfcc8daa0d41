package scheduler

import (
	"context"
	"time"
)

func (s *Scheduler) isDraining() bool { return s.draining.Load() }

// drain ends a Run: nothing new starts, queued launches are dropped (the nodes that watch their
// slots run those that waited behind another), running ones get Config.Drain to end and are then
// stopped through their stop path, and drain returns once every launch has ended.
func (s *Scheduler) drain() {
	s.draining.Store(true)
	s.mu.Lock()
	jobs := make([]*jobState, 0, len(s.jobs))
	for _, js := range s.jobs {
		jobs = append(jobs, js)
	}
	jobs = append(jobs, s.retired...)
	s.mu.Unlock()
	running := 0
	for _, js := range jobs {
		js.mu.Lock()
		if n := len(js.queue); n > 0 {
			s.log.Info("draining: dropping queued launches", "task", js.job.Name, "launches", n)
		}
		js.queue = nil
		running += len(js.actives)
		js.mu.Unlock()
	}
	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	if running > 0 {
		s.log.Info("draining: waiting for running jobs to end", "running", running, "drain", s.c.Drain.String())
	}
	select {
	case <-done:
		return
	case <-time.After(s.c.Drain):
	case <-s.hurry:
	}
	for _, js := range jobs {
		js.mu.Lock()
		for _, a := range js.actives {
			js.stopLocked(context.Background(), a, "the node drains (its drain time is over)")
		}
		js.mu.Unlock()
	}
	<-done
}
