package cli

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/once-run/once/internal/who"
	"github.com/once-run/once/store"
)

// trigger is one start of once for a task, as history shows it: one lease (every attempt and event
// under one fencing token, so a catch-up of five slots is one launch), one busy event, or one
// skipped event without a token (a launch that found its slot done before it took the lease:
// store.LocalReads).
type trigger struct {
	at     time.Time
	holder string
	ran    bool // an attempt was made under it: the job ran
}

// holderHost is the host part of a holder: "USER@HOST:PID" (the default) or "HOST:PID" (an older
// once's) without its user and pid, so that root's crontab and alice's, launching the same task on
// one host, are one host's double trigger; any other holder (a pod name, a name given with
// --holder) stands for a host of its own.
func holderHost(holder string) string {
	if _, h, _, ok := who.Parse(holder); ok {
		return h
	}
	return holder
}

// launches groups history into launches per task, leaving out drill launches.
func launches(hist []store.Entry) map[string][]trigger {
	byTask := map[string]map[string]trigger{}
	for _, e := range hist {
		if strings.HasPrefix(e.Holder, drillHolderPrefix) {
			continue
		}
		key := ""
		switch {
		case e.State == store.Busy:
			key = "busy/" + e.RunID + "/" + e.StartedAt.String()
		case e.Token > 0:
			key = "token/" + strconv.FormatInt(e.Token, 10)
		case e.State == store.Skipped:
			key = "skipped/" + e.RunID + "/" + e.StartedAt.String()
		default:
			continue
		}
		m := byTask[e.Task]
		if m == nil {
			m = map[string]trigger{}
			byTask[e.Task] = m
		}
		l, ok := m[key]
		if !ok || e.StartedAt.Before(l.at) {
			l.at, l.holder = e.StartedAt, e.Holder
		}
		switch e.State {
		case store.Running, store.Succeeded, store.Failed, store.Unknown:
			l.ran = true
		}
		m[key] = l
	}
	out := map[string][]trigger{}
	for task, m := range byTask {
		ls := make([]trigger, 0, len(m))
		for _, l := range m {
			ls = append(ls, l)
		}
		sort.Slice(ls, func(i, j int) bool { return ls[i].at.Before(ls[j].at) })
		out[task] = ls
	}
	return out
}

// burstOf says what is wrong with launches that started within one window: two from one host (a
// double trigger there), or two that ran the job. Launches from other hosts that did not run —
// busy, skipped, waiting for review — are the multi-host layout working: every host's crontab
// fires, one runs, the others lose.
func burstOf(ls []trigger) (host string, ran int) {
	seen := map[string]bool{}
	for _, l := range ls {
		h := holderHost(l.holder)
		if seen[h] && host == "" {
			host = h
		}
		seen[h] = true
		if l.ran {
			ran++
		}
	}
	return host, ran
}

// bursts reports tasks launched several times within window by one host, or run several times
// within it by several.
// burstHolders is how many holders a burst's line names (a contended launch of a hundred processes
// made a line of a hundred holders); the others are counted.
const burstHolders = 5

// someOf joins the first n of names and counts the rest.
func someOf(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

func bursts(hist []store.Entry, window time.Duration, r *report) {
	found := 0
	byTask := launches(hist)
	for _, task := range sortedKeys(byTask) {
		ls := byTask[task]
		n := 0
		var worst []trigger // the most recent burst: ls is oldest first
		for i := 0; i < len(ls); i++ {
			j := i
			for j+1 < len(ls) && ls[j+1].at.Sub(ls[i].at) < window {
				j++
			}
			if host, ran := burstOf(ls[i : j+1]); j > i && (host != "" || ran > 1) {
				n++
				worst = ls[i : j+1]
				i = j
			}
		}
		if n == 0 {
			continue
		}
		found++
		holders := map[string]bool{}
		for _, l := range worst {
			holders[l.holder] = true
		}
		span, at, who := worst[len(worst)-1].at.Sub(worst[0].at).Round(time.Millisecond), fmtT(worst[0].at), someOf(sortedKeys(holders), burstHolders)
		more := ""
		if n > 1 {
			more = fmt.Sprintf("; %d such bursts in the history scanned", n)
		}
		if host, ran := burstOf(worst); host != "" {
			r.add("burst", store.LevelWarn, task, "launched %d times from host %s within %s at %s (holders %s)%s: a double trigger? look for two crontab lines, a cron entry and a timer, or a start by hand",
				len(worst), host, span, at, who, more)
		} else {
			r.add("burst", store.LevelWarn, task, "ran %d times within %s at %s (holders %s)%s: every launch ran the job; without a slot (--per, --schedule, --slot) each host's trigger runs it again: give it a slot, or trigger it from one place",
				ran, span, at, who, more)
		}
	}
	if found == 0 {
		r.add("burst", store.LevelOK, "", "no task was launched twice within %s from one host, or run twice within it", window)
	}
}
