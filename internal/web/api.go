package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// The JSON API, /api/v1 (docs/api.md). Every answer is a JSON object; an error is
// {"error": "one line saying what was wrong and what to do"} with the status that says whose
// fault it is: 400 bad input, 401/403 access, 404 nothing there, 409 a conflict with the ledger's
// state, 503 the store cannot be reached.

func writeJSONTo(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func apiError(w http.ResponseWriter, status int, msg string) {
	writeJSONTo(w, status, map[string]string{"error": msg})
}

// badInput is an error in what the caller sent: 400.
type badInput struct{ msg string }

func (e badInput) Error() string { return e.msg }

func bad(format string, a ...any) error { return badInput{fmt.Sprintf(format, a...)} }

// statusOf maps an error to the status of its answer, in one place for the API and the pages.
func statusOf(err error) int {
	var b badInput
	switch {
	case errors.As(err, &b), errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrInvalidKey):
		return http.StatusBadRequest
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, store.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, store.ErrUnavailable):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func (s *Server) apiFail(w http.ResponseWriter, r *http.Request, err error) {
	err = s.storeErr(r, err)
	st := statusOf(err)
	if st >= 500 {
		s.c.Log.Warn("request failed", "path", r.URL.Path, "err", err)
	}
	apiError(w, st, err.Error())
}

// Parameters, checked the same way for the API and the pages.

func limitParam(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return defaultPage, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxPage || v[0] < '1' || v[0] > '9' { // as the CLI: no sign, no leading 0
		return 0, bad("limit=%q: give a whole number from 1 to %d", clip(v), maxPage)
	}
	return n, nil
}

func timeParam(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, bad("%s=%q: give a time as RFC 3339, e.g. 2026-12-01T00:00:00Z", name, clip(v))
	}
	return t, nil
}

func taskParam(r *http.Request, required bool) (string, error) {
	t := r.URL.Query().Get("task")
	if t == "" && !required {
		return "", nil
	}
	if t == "" {
		return "", bad("give task=NAME")
	}
	if err := once.ValidateTask(t); err != nil {
		return "", bad("task=%q: %v", clip(t), err)
	}
	return t, nil
}

func clip(s string) string { return store.Clip(s, 64) }

func (s *Server) apiTasks(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r)
	if err == nil && limit > maxTasks {
		err = bad("limit=%d: a page of tasks holds at most %d (each task costs two short reads); follow next", limit, maxTasks)
	}
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	p, err := s.tasks(r.Context(), r.URL.Query().Get("after"), limit)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSONTo(w, http.StatusOK, p)
}

// historyFilter reads the history parameters: task, slot, kind (an attempt state or an event
// kind, or "attempts" / "events"), holder, from, to, before, after, limit.
func historyFilter(r *http.Request) (HistoryFilter, error) {
	var f HistoryFilter
	q := r.URL.Query()
	var err error
	if f.Task, err = taskParam(r, false); err != nil {
		return f, err
	}
	f.Slot, f.Before, f.After, f.Holder = q.Get("slot"), q.Get("before"), q.Get("after"), q.Get("holder")
	switch k := q.Get("kind"); k {
	case "attempts":
		f.Attempts = true
	case "events":
		f.Events = true
	default:
		f.Kind = store.State(k)
		if err := store.CheckKind(f.Kind); err != nil {
			return f, bad("kind=%q: give an attempt state, an event kind, attempts or events", clip(k))
		}
	}
	if f.Limit, err = limitParam(r); err != nil {
		return f, err
	}
	if f.From, err = timeParam(r, "from"); err != nil {
		return f, err
	}
	if f.To, err = timeParam(r, "to"); err != nil {
		return f, err
	}
	for _, c := range []string{f.Before, f.After} {
		if c == "" {
			continue
		}
		if _, err := store.ParseCursor(c); err != nil {
			return f, bad("%v", err)
		}
	}
	return f, nil
}

func (s *Server) apiHistory(w http.ResponseWriter, r *http.Request) {
	f, err := historyFilter(r)
	if err == nil {
		var p HistoryPage
		if p, err = s.history(r.Context(), f); err == nil {
			writeJSONTo(w, http.StatusOK, p)
			return
		}
	}
	s.apiFail(w, r, err)
}

// SlotDetail is one slot: what the ledger decides by, its history, and its output tails.
type SlotDetail struct {
	store.SlotState
	History []store.Entry     `json:"history"`
	Tails   map[string]string `json:"tails"` // by run id, of the newest slotTails attempts
	// TailsNotRead counts the older attempts whose tail was not read (once logs JOB --slot S
	// --attempt N shows one): a tail is up to 512 KiB, and a slot retried all night has 200.
	TailsNotRead int `json:"tails_not_read,omitempty"`
	// Env is what each attempt's command saw of once (by run id), under the names it saw them
	// (once.Run.Env): ONCE_TASK, ONCE_SLOT, ONCE_RUN_ID, ONCE_FENCING_TOKEN, ONCE_ATTEMPT.
	Env map[string]map[string]string `json:"env"`
	// HolderGone, when the slot's last attempt is still recorded as running but its holder's lease
	// is gone, is that attempt as GET /api/v1/running shows it (with the resolve commands).
	HolderGone *Running `json:"holder_gone,omitempty"`
}

func (s *Server) slotDetail(r *http.Request) (SlotDetail, error) {
	task, err := taskParam(r, true)
	if err != nil {
		return SlotDetail{}, err
	}
	sl := r.URL.Query().Get("slot")
	if err := s.checkSlot(r.Context(), task, sl); err != nil {
		return SlotDetail{}, bad("slot=%q: %v", clip(sl), err)
	}
	ctx := r.Context()
	st, err := s.c.Store.Slot(ctx, task, sl)
	if err != nil {
		return SlotDetail{}, err
	}
	d := SlotDetail{SlotState: st, Tails: map[string]string{}, Env: map[string]map[string]string{}}
	if d.History, err = s.slotHistory(ctx, task, sl, slotEntries); err != nil {
		return SlotDetail{}, err
	}
	if st.Last == nil && len(d.History) == 0 {
		return SlotDetail{}, fmt.Errorf("%w: task %s has nothing in slot %q", store.ErrNotFound, task, sl)
	}
	if a := st.Last; a != nil && a.State == store.Running {
		if r, ok := s.gone(ctx)[goneKey(a.Task, a.Slot, a.RunID, a.Number)]; ok {
			d.HolderGone = &r
		}
	}
	attempts := 0
	for _, e := range d.History {
		if !e.State.IsAttempt() {
			continue
		}
		d.Env[e.RunID] = map[string]string{"ONCE_TASK": e.Task, "ONCE_SLOT": e.Slot, "ONCE_RUN_ID": e.RunID,
			"ONCE_FENCING_TOKEN": strconv.FormatInt(e.Token, 10), "ONCE_ATTEMPT": strconv.Itoa(e.Number)}
		if attempts++; attempts > slotTails {
			d.TailsNotRead++
		} else if t := s.tail(ctx, e.RunID); t != "" {
			d.Tails[e.RunID] = t
		}
	}
	return d, nil
}

// slotHistory is the newest n entries of task's slot sl. A HistoryQuery's Slot "" means every
// slot, so the entries of the slot "" (a task run without --per, --schedule or --slot) are picked
// out here, among the task's newest maxScan entries: its run detail and review evidence showed
// every other slot's attempts as its own.
func (s *Server) slotHistory(ctx context.Context, task, sl string, n int) ([]store.Entry, error) {
	if sl != "" {
		return s.c.Store.History(ctx, store.HistoryQuery{Task: task, Slot: sl, Limit: n})
	}
	out := []store.Entry{}
	err := store.EachHistory(ctx, s.c.Store, store.HistoryQuery{Task: task, Limit: maxScan}, func(e store.Entry) error {
		if e.Slot == "" {
			out = append(out, e)
		}
		if len(out) == n {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	return out, nil
}

func (s *Server) apiSlot(w http.ResponseWriter, r *http.Request) {
	d, err := s.slotDetail(r)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSONTo(w, http.StatusOK, d)
}

func (s *Server) apiLeases(w http.ResponseWriter, r *http.Request) {
	ls, err := s.leases(r.Context())
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSONTo(w, http.StatusOK, map[string]any{"leases": ls, "now": s.c.Now().UTC()})
}

// apiRunning is the attempts still recorded as running, each with whether its holder's lease is
// live, and the resolve commands of those whose holder is gone (once status --json's running).
func (s *Server) apiRunning(w http.ResponseWriter, r *http.Request) {
	sec, _, err := s.running(r.Context())
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSONTo(w, http.StatusOK, sec)
}

func (s *Server) apiReview(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	rs, total, err := s.reviews(r.Context(), limit)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSONTo(w, http.StatusOK, map[string]any{"review": rs, "total": total})
}

// resolveRequest is the body of POST /api/v1/review/resolve.
type resolveRequest struct {
	Task string `json:"task"`
	Slot string `json:"slot"`
	As   string `json:"as"`
	Note string `json:"note"`
	By   string `json:"by"`
}

// resolve checks a decision and records it; the same rules as once resolve, and a note is
// required: the dashboard's decisions are read later by someone who was not there.
func (s *Server) resolve(r *http.Request, req resolveRequest) (store.Attempt, error) {
	if err := once.ValidateTask(req.Task); err != nil {
		return store.Attempt{}, bad("task %q: %v", clip(req.Task), err)
	}
	if err := s.checkSlot(r.Context(), req.Task, req.Slot); err != nil {
		return store.Attempt{}, bad("slot %q: %v", clip(req.Slot), err)
	}
	as := store.State(req.As)
	if as != store.Succeeded && as != store.Failed {
		return store.Attempt{}, bad("as %q: give succeeded (the slot is done) or failed (run it again)", clip(req.As))
	}
	if strings.TrimSpace(req.Note) == "" {
		return store.Attempt{}, bad("give a note: why this decision (it is kept in history)")
	}
	if err := store.CheckText("note", req.Note, store.MaxNoteLen); err != nil {
		return store.Attempt{}, bad("%v", err)
	}
	if strings.TrimSpace(req.By) == "" {
		return store.Attempt{}, bad("give by: who decides (kept in history)")
	}
	by := req.By + " via once serve"
	if err := store.CheckName("by", by, store.MaxByLen); err != nil {
		return store.Attempt{}, bad("%v", err)
	}
	att, err := s.c.Store.Resolve(r.Context(), store.ResolveRequest{Task: req.Task, Slot: req.Slot, As: as, By: by, Note: req.Note})
	if errors.Is(err, store.ErrConflict) {
		return store.Attempt{}, fmt.Errorf("%w: task %s slot %q is not waiting for review (already decided, running, or done): nothing was recorded", store.ErrConflict, req.Task, req.Slot)
	}
	if err != nil {
		return store.Attempt{}, err
	}
	s.c.Log.Info("resolved", "task", req.Task, "slot", req.Slot, "as", as, "by", by, "attempt", att.Number, "from", r.RemoteAddr)
	return att, nil
}

// decodeResolve reads a resolve request's body: one JSON object whose keys are task, slot, as,
// note and by exactly (encoding/json matches "AS" to as too), each at most once (encoding/json
// keeps the last of two), with nothing after it. {"as":"failed","AS":"succeeded"} was recorded as
// succeeded, and text after the object was ignored: a decision is taken only as written.
func decodeResolve(body io.Reader) (resolveRequest, error) {
	var req resolveRequest
	fields := map[string]*string{"task": &req.Task, "slot": &req.Slot, "as": &req.As, "note": &req.Note, "by": &req.By}
	dec := json.NewDecoder(body)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return req, errors.New("it does not start with {")
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return req, err
		}
		k, _ := t.(string)
		f, ok := fields[k]
		switch {
		case !ok:
			return req, fmt.Errorf("unknown field %q", clip(k))
		case seen[k]:
			return req, fmt.Errorf("field %q given twice", k)
		}
		seen[k] = true
		if err := dec.Decode(f); err != nil {
			return req, fmt.Errorf("field %q: give a string", k)
		}
	}
	if _, err := dec.Token(); err != nil {
		return req, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, errors.New("something follows the object")
	}
	return req, nil
}

func (s *Server) apiResolve(w http.ResponseWriter, r *http.Request) {
	req, err := decodeResolve(r.Body)
	if err != nil {
		apiError(w, http.StatusBadRequest, "the body is not a JSON object of task, slot, as, note, by: "+err.Error())
		return
	}
	att, err := s.resolve(r, req)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSONTo(w, http.StatusOK, map[string]any{"resolved": att})
}

func (s *Server) apiTimeline(w http.ResponseWriter, r *http.Request) {
	from, to, task, err := s.timelineParams(r)
	if err == nil {
		var tl Timeline
		if tl, err = s.timeline(r.Context(), from, to, task); err == nil {
			writeJSONTo(w, http.StatusOK, tl)
			return
		}
	}
	s.apiFail(w, r, err)
}

// maxRange bounds a timeline's range.
const maxRange = 31 * 24 * time.Hour

func (s *Server) timelineParams(r *http.Request) (from, to time.Time, task string, err error) {
	if task, err = taskParam(r, false); err != nil {
		return
	}
	if from, err = timeParam(r, "from"); err != nil {
		return
	}
	if to, err = timeParam(r, "to"); err != nil {
		return
	}
	if to.IsZero() {
		to = s.c.Now()
	}
	if from.IsZero() {
		from = to.Add(-24 * time.Hour)
	}
	if !from.Before(to) || to.Sub(from) > maxRange {
		err = bad("from=%s to=%s: give from before to, at most 31 days apart", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	return from.UTC(), to.UTC(), task, err
}

func (s *Server) jobs(r *http.Request) ([]scheduler.JobInfo, error) {
	if s.c.Jobs == nil {
		return []scheduler.JobInfo{}, nil
	}
	return scheduler.Describe(r.Context(), s.c.Store, s.c.Jobs(), s.c.Now(), 3)
}

func (s *Server) apiJobs(w http.ResponseWriter, r *http.Request) {
	js, err := s.jobs(r)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSONTo(w, http.StatusOK, map[string]any{"jobs": js, "daemon": s.c.Jobs != nil})
}

// jobAction pauses, resumes or triggers a daemon job, for the whole fleet (the request is kept in
// the store). It returns what happened in one line.
func (s *Server) jobAction(r *http.Request, name, action, by, note string) (string, error) {
	if s.c.Jobs == nil {
		return "", fmt.Errorf("%w: this server knows no daemon jobs: start it with --jobs PATH (or use once daemon --http)", store.ErrNotFound)
	}
	known := false
	for _, j := range s.c.Jobs() {
		known = known || j.Name == name
	}
	if !known {
		return "", fmt.Errorf("%w: no job %q in the jobs file", store.ErrNotFound, clip(name))
	}
	if by == "" {
		// Not this server's OS user, who did not click: the dashboard shares one token, so it
		// cannot know who did (the log line has the address). It was "once serve via once serve".
		by = "someone"
	}
	// Checked as once pause checks its own: the pause request's claimant names who and why.
	if err := store.CheckName("by", by+" via once serve", store.MaxByLen); err != nil {
		return "", bad("%v", err)
	}
	if err := store.CheckText("note", note, scheduler.MaxPauseNote); err != nil {
		return "", bad("%v", err)
	}
	ctx := r.Context()
	var msg string
	switch action {
	case "pause":
		ok, k, err := scheduler.Pause(ctx, s.c.Store, name, by+" via once serve", note)
		if err != nil {
			return "", err
		}
		msg = "paused " + name
		if !ok {
			msg = name + " was already paused (" + k.RunID + ")"
		}
	case "resume":
		ok, err := scheduler.Resume(ctx, s.c.Store, name)
		if err != nil {
			return "", err
		}
		msg = "resumed " + name
		if !ok {
			msg = name + " was not paused"
		}
	case "trigger":
		ok, sl, err := scheduler.Trigger(ctx, s.c.Store, name, s.c.Now())
		if err != nil {
			return "", err
		}
		msg = "triggered " + name + " as slot " + sl
		if !ok {
			msg = name + " has a trigger waiting already (slot " + sl + ")"
		}
	default:
		return "", bad("action %q: give pause, resume or trigger", clip(action))
	}
	s.c.Log.Info("job "+action, "job", name, "by", by, "from", r.RemoteAddr)
	return msg, nil
}

func (s *Server) apiJobAction(w http.ResponseWriter, r *http.Request) {
	msg, err := s.jobAction(r, r.PathValue("name"), r.PathValue("action"), r.URL.Query().Get("by"), r.URL.Query().Get("note"))
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	writeJSONTo(w, http.StatusOK, map[string]string{"result": msg})
}

// checkSlot refuses a slot name --slot refuses (slot.CheckValue), unless task has an attempt in it:
// an older once recorded it (its library took any value, its command one not in Unicode NFC), and
// the dashboard shows it (waiting for review, in history) with the actions that decide it.
func (s *Server) checkSlot(ctx context.Context, task, sl string) error {
	if sl == "" {
		return nil
	}
	err := slot.CheckValue(sl)
	if err == nil {
		return nil
	}
	if st, lerr := s.c.Store.Slot(ctx, task, sl); lerr == nil && st.Last != nil {
		return nil
	}
	return err
}
