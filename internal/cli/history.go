package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/once-run/once"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// historyChunk is how many text rows share one table layout: the table is written (and forgotten)
// in chunks, so that --limit 0 prints any history in bounded memory.
const historyChunk = 1000

func (a *app) historyCmd() *cobra.Command {
	var q store.HistoryQuery
	var asJSON, asJSONL bool
	c := &cobra.Command{
		Use:   "history [--task T] [--slot S] [--kind KIND] [--limit N] [--before CURSOR | --after CURSOR] [--json | --jsonl]",
		Short: "Attempts and events (skipped, busy, review, missed), newest first",
		Long: `Attempts and events (skipped, busy, review, missed), newest first.

--kind KIND lists only the entries of one kind: an attempt state (running, succeeded, failed,
unknown) or an event kind (skipped, busy, review, missed: a slot whose fire time passed while no
node of once daemon ran it, outside its catch-up window). Its pages and cursors work as without it.

Every entry has a cursor (the "cursor" field of --json and --jsonl). --before CURSOR lists the
entries older than that entry (the next page), --after CURSOR the ones newer than it (the previous
page: the --limit entries nearest to it, still newest first). When --limit cuts the list short,
the cursor of the next page is printed to stderr. --limit 0 lists everything, read and written page
by page, in bounded memory.

--json prints one JSON array, --jsonl one JSON object per line (the same fields), written as they
are read: for a pipe into jq -c, or a large history.`,
		Example: `  once history --task nightly-sync --limit 10
  once history --kind missed --limit 20
  once history --task nightly-sync --limit 10 --before 1767323045123456.a.42
  once history --task nightly-sync --slot 2026-11-29 --json
  once history --limit 0 --jsonl | jq -c 'select(.state == "failed")'`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkHistoryQuery(q, asJSON, asJSONL); err != nil {
				return err
			}
			return a.history(c.Context(), q, asJSON, asJSONL)
		},
	}
	c.Flags().StringVar(&q.Task, "task", "", "only this task")
	c.Flags().StringVar(&q.Slot, "slot", "", "only this slot")
	c.Flags().StringVar((*string)(&q.Kind), "kind", "", "only entries of this kind: running, succeeded, failed, unknown, skipped, busy, review or missed")
	c.Flags().IntVar(&q.Limit, "limit", 50, "at most this many entries (0: all, streamed)")
	c.Flags().StringVar(&q.Before, "before", "", "only entries older than the entry with this cursor (the next page)")
	c.Flags().StringVar(&q.After, "after", "", "only entries newer than the entry with this cursor (the previous page)")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	c.Flags().BoolVar(&asJSONL, "jsonl", false, "print one JSON object per line")
	return c
}

// checkHistoryQuery checks once history's flags before the store is opened.
func checkHistoryQuery(q store.HistoryQuery, asJSON, asJSONL bool) error {
	if q.Task != "" {
		if err := once.ValidateTask(q.Task); err != nil {
			return err
		}
	}
	if q.Slot != "" && q.Task == "" {
		// With --task, a name --slot refuses is looked up first (history): an older once's
		// library took any value.
		if err := slot.CheckValue(q.Slot); err != nil {
			return usage("%v", err)
		}
	}
	if err := store.CheckKind(q.Kind); err != nil {
		return usage("--kind: %v", err)
	}
	if q.Limit < 0 {
		return usage("--limit %d is negative", q.Limit)
	}
	if asJSON && asJSONL {
		return usage("--json and --jsonl: give one")
	}
	for name, v := range map[string]string{"--before": q.Before, "--after": q.After} {
		if _, err := store.ParseCursor(v); v != "" && err != nil {
			return usage("%s: %v", name, err)
		}
	}
	return nil
}

// history prints the entries q selects: a page of --limit entries (and the cursor of the next one on
// stderr), or all of them, streamed.
func (a *app) history(ctx context.Context, q store.HistoryQuery, asJSON, asJSONL bool) error {
	s, _, err := a.openToRead(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	if q.Slot != "" && q.Task != "" {
		if err := slot.CheckValue(q.Slot); err != nil && !recordedSlot(ctx, s, q.Task, q.Slot) {
			return usage("%v", err)
		}
	}
	out := bufio.NewWriterSize(a.stdout, 64<<10)
	var w historyWriter
	switch {
	case asJSON:
		w = &jsonArray{w: out}
	case asJSONL:
		w = &jsonLines{w: out}
	default:
		w = &historyTable{w: out}
	}
	// One entry more than --limit tells whether there is a next page.
	limit := q.Limit
	if limit > 0 {
		q.Limit++
	}
	var shown []store.Entry // with --limit: the page, to drop the extra entry and name the next cursor
	n := 0
	err = store.EachHistory(ctx, s, q, func(e store.Entry) error {
		if limit > 0 {
			shown = append(shown, e)
			return nil
		}
		n++
		if n%historyChunk == 0 {
			if err := out.Flush(); err != nil {
				return err
			}
		}
		return w.entry(e)
	})
	if err != nil {
		return err
	}
	more := ""
	if limit > 0 && len(shown) > limit {
		if q.After != "" { // the extra entry is the newest: the previous page goes on from the first shown
			shown = shown[1:]
			more = "--after " + shown[0].Cursor
		} else {
			shown = shown[:limit]
			more = "--before " + shown[limit-1].Cursor
		}
	}
	for _, e := range shown {
		if err := w.entry(e); err != nil {
			return err
		}
	}
	if err := w.end(); err != nil {
		return err
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if more != "" && !asJSON && !asJSONL {
		fmt.Fprintf(a.stderr, "once: more entries: add %s for the next page\n", more)
	}
	return nil
}

// historyWriter writes entries as they come, then ends the output.
type historyWriter interface {
	entry(e store.Entry) error
	end() error
}

// historyTable writes the text table, a header then rows, laid out historyChunk rows at a time.
type historyTable struct {
	w    io.Writer
	tw   *tabwriter.Writer
	rows int
}

// start begins a chunk of the table; the first has the header.
func (t *historyTable) start() {
	if t.tw == nil {
		t.tw = tabwriter.NewWriter(t.w, 0, 4, 2, ' ', 0)
		if t.rows == 0 {
			fmt.Fprintln(t.tw, "STARTED\tTASK\tSLOT\tATTEMPT\tSTATE\tEXIT\tDURATION\tRECORDS\tHOLDER\tTOKEN\tRUN ID\tNOTE")
		}
	}
}

func (t *historyTable) entry(e store.Entry) error {
	t.start()
	exit, dur := "-", "-"
	if e.ExitCode != nil {
		exit = strconv.Itoa(*e.ExitCode)
	}
	if e.EndedAt != nil {
		dur = e.EndedAt.Sub(e.StartedAt).Round(time.Millisecond).String()
	}
	note := e.Note
	if e.Progress != "" {
		note = strings.TrimSpace("progress " + e.Progress + " " + note)
	}
	if e.Checkpoint != "" {
		note = strings.TrimSpace(note + " checkpoint=" + e.Checkpoint)
	}
	if r := e.Resolution; r != nil {
		note = strings.TrimSpace(fmt.Sprintf("%s [resolved as %s by %s at %s: %s]", note, r.As, r.By, fmtTime(r.At), r.Note))
	}
	att := "-"
	if e.Number > 0 {
		att = strconv.Itoa(e.Number)
	}
	fmt.Fprintf(t.tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", fmtTime(e.StartedAt), cell(e.Task), cell(dash(e.Slot)), att,
		cell(string(e.State)), exit, dur, e.Records, cell(e.Holder), e.Token, cell(dash(e.RunID)), oneLineText(note))
	t.rows++
	if t.rows%historyChunk == 0 {
		return t.end()
	}
	return nil
}

func (t *historyTable) end() error {
	if t.rows == 0 {
		t.start() // no entry: the header alone
	}
	if t.tw == nil {
		return nil
	}
	err := t.tw.Flush()
	t.tw = nil
	return err
}

// jsonArray writes one JSON array, element by element, as the whole array indented by two
// spaces would be (--json's output before it was streamed).
type jsonArray struct {
	w io.Writer
	n int
}

func (j *jsonArray) entry(e store.Entry) error {
	b, err := json.MarshalIndent(e, "  ", "  ")
	if err != nil {
		return err
	}
	sep := ",\n  "
	if j.n == 0 {
		sep = "[\n  "
	}
	j.n++
	if _, err := io.WriteString(j.w, sep); err != nil {
		return err
	}
	_, err = j.w.Write(b)
	return err
}

func (j *jsonArray) end() error {
	if j.n == 0 {
		_, err := io.WriteString(j.w, "[]\n")
		return err
	}
	_, err := io.WriteString(j.w, "\n]\n")
	return err
}

// jsonLines writes one JSON object per line.
type jsonLines struct{ w io.Writer }

func (j *jsonLines) entry(e store.Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = j.w.Write(append(b, '\n'))
	return err
}

func (j *jsonLines) end() error { return nil }
