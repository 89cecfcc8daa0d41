package job

import (
	"errors"

	"github.com/once-run/once"
	"github.com/once-run/once/notify"
	"github.com/once-run/once/store"
)

// notifyResult posts the events a result of a call with options o calls for: every abandoned
// attempt is unknown; an attempt whose outcome was not recorded is unknown, a failed one failed;
// a slot that needs review is announced, with the commands that decide it, and pinged as a fail.
func (r *Runner) notifyResult(o once.Options, res once.Result) {
	url := r.j.Notify
	if url == "" && r.j.Ping == "" {
		return
	}
	for _, a := range res.Abandoned {
		r.out.Event(url, notify.Event{Event: notify.Unknown, Task: a.Task, Slot: a.Slot, RunID: a.RunID,
			Attempt: a.Number, Holder: a.Holder, Token: a.Token, Reason: "the attempt's holder vanished; its outcome is unknown",
			Resolve: r.resolve(a.Slot)})
	}
	switch res.Decision {
	case once.Ran:
		a := res.Attempt
		switch {
		case res.RecordErr != nil:
			r.out.Event(url, notify.Event{Event: notify.Unknown, Task: a.Task, Slot: a.Slot, RunID: a.RunID,
				Attempt: a.Number, Holder: a.Holder, Token: a.Token, Reason: unrecorded(res.RecordErr)})
		case a.State == store.Failed:
			r.out.Event(url, notify.Event{Event: notify.Failed, Task: a.Task, Slot: a.Slot, RunID: a.RunID,
				Attempt: a.Number, Holder: a.Holder, Token: a.Token, ExitCode: a.ExitCode, Reason: a.Note})
		}
	case once.Review:
		ev := notify.Event{Event: notify.Review, Task: o.Task, Slot: res.Slot, Holder: o.Holder, Reason: res.Reason,
			Resolve: r.resolve(res.Slot)}
		if a := res.Attempt; a != nil {
			ev.RunID, ev.Attempt, ev.Holder = a.RunID, a.Number, a.Holder
		}
		r.out.Event(url, ev)
		r.out.Ping(r.j.Ping, notify.PingFail, "")
	}
}

// resolve is the commands that decide slot, for a notification (nil without a slot, or without
// Job.Resolve: only a slot can wait for review).
func (r *Runner) resolve(slot string) *notify.Resolve {
	if slot == "" || r.j.Resolve == nil {
		return nil
	}
	return r.j.Resolve(slot)
}

// unrecorded is the reason of an unknown event for an outcome not recorded: its error says itself
// when it may have been recorded (once.ErrMaybeRecorded).
func unrecorded(err error) string {
	if errors.Is(err, once.ErrMaybeRecorded) {
		return err.Error()
	}
	return "outcome not recorded: " + err.Error()
}
