package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/once-run/once/keys"
	"github.com/once-run/once/store"
)

// keysBatch is how many keys `once keys` reads, claims and prints at a time: memory stays bounded
// whatever the input's length.
const keysBatch = 1000

// maxUnknownLines caps the per-key lines about unknown keys; the count is always printed.
const maxUnknownLines = 20

func (a *app) keysCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "keys",
		Short: "Business idempotency keys for shell jobs: claim, done, status, forget, schema",
		Long: `Business idempotency keys kept in the store, one set per scope: a key is handed out once, ever
(until forgotten). Use them to make a job's writes idempotent when it is re-run after a crash.`,
	}
	c.AddCommand(a.keysClaimCmd(), a.keysDoneCmd(), a.keysStatusCmd(), a.keysForgetCmd(), a.keysSchemaCmd())
	c.PersistentFlags().BoolVar(&a.allowEdgeSpace, "allow-edge-space", false, allowEdgeSpaceUsage)
	return c
}

// keysStore opens the store as store.Keys.
func (a *app) keysStore(ctx context.Context) (store.Keys, func(), error) {
	return a.keysStoreWith(ctx, a.open)
}

// keysStoreWith is keysStore, the store opened by open (a.open, or a.openToRead to only read).
func (a *app) keysStoreWith(ctx context.Context, open func(context.Context) (store.Store, string, error)) (store.Keys, func(), error) {
	s, dsn, err := open(ctx)
	if err != nil {
		return nil, nil, err
	}
	k, ok := s.(store.Keys)
	if !ok {
		s.Close()
		return nil, nil, usage("the store %s does not implement store.Keys (business keys); use one of the built-in stores", store.Redact(dsn))
	}
	return k, func() { s.Close() }, nil
}

const allowEdgeSpaceUsage = "take keys and scopes that start or end with whitespace (a space, a no-break space, a BOM) as they are: they are other keys than the ones without it"

// edgeSpaceFix is what the message about a key with whitespace at an end tells to do.
const edgeSpaceFix = "(sed 's/^[[:space:]]*//; s/[[:space:]]*$//' strips spaces and tabs), or give --allow-edge-space if it is part of your keys"

// checkKey is keys.Validate plus, unless --allow-edge-space, keys.CheckEdges: " order-2" from a
// careless CSV would be another key than "order-2", claimed a second time.
func (a *app) checkKey(k string) error {
	if err := keys.Validate(k); err != nil {
		return err
	}
	if !a.allowEdgeSpace {
		if err := keys.CheckEdges(k); err != nil {
			return fmt.Errorf("%w %s", err, edgeSpaceFix)
		}
	}
	return nil
}

func (a *app) checkScope(scope string) error {
	if scope == "" || len(scope) > 200 {
		return usage("--scope %q: give 1 to 200 bytes, e.g. the task name", scope)
	}
	if err := a.checkKey(scope); err != nil {
		return usage("--scope: %v", err)
	}
	return nil
}

// checkOwnScope is checkScope for the commands that write keys (claim, done, forget, effect):
// they refuse the scopes once daemon keeps its own records in (internalScopes). A slot marked
// recorded there by hand is never run; one forgotten may be recorded or followed up again.
func (a *app) checkOwnScope(scope string) error {
	if err := a.checkScope(scope); err != nil {
		return err
	}
	if strings.HasPrefix(scope, internalScopes) {
		return usage("--scope %q: the scopes %s* hold once daemon's own records; writing there can make it skip or rerun a slot: use a scope of your own (reading them with once keys status is fine)", scope, internalScopes)
	}
	return nil
}

// runClaimant is the current `once run` attempt from its environment, for two-phase claims.
func runClaimant(what string) (store.Claimant, error) {
	task, runID, tok := os.Getenv("ONCE_TASK"), os.Getenv("ONCE_RUN_ID"), os.Getenv("ONCE_FENCING_TOKEN")
	if task == "" || runID == "" || tok == "" {
		return store.Claimant{}, usage("%s works only inside a command run by once run (ONCE_TASK, ONCE_RUN_ID and ONCE_FENCING_TOKEN are not set)", what)
	}
	token, err := strconv.ParseInt(tok, 10, 64)
	if err != nil || token <= 0 {
		return store.Claimant{}, usage("ONCE_FENCING_TOKEN %q is not a positive integer", tok)
	}
	return store.Claimant{Task: task, RunID: runID, Token: token}, nil
}

// eachBatch calls fn with batches of at most keysBatch valid keys: the arguments, or stdin one a
// line when there are none. A bad key stops the input before its batch is used: exit 64 naming
// the argument or line; batches before it were already used (said in the message). A stop signal
// stops it between batches (batchStop): exit 128+N, saying how many keys were used.
func (a *app) eachBatch(args []string, fn func(batch []string) error) error {
	b := newBatchStop()
	defer b.release()
	used := 0
	use := func(batch []string) error {
		if s := b.stopped(); s != nil {
			return stoppedKeys(s, used)
		}
		if err := fn(batch); err != nil {
			return err
		}
		used += len(batch)
		return nil
	}
	if len(args) > 0 {
		for i, k := range args {
			if err := a.checkKey(k); err != nil {
				return usage("argument %d: %v; nothing was claimed", i+1, err)
			}
		}
		for lo := 0; lo < len(args); lo += keysBatch {
			if err := use(args[lo:min(lo+keysBatch, len(args))]); err != nil {
				return err
			}
		}
		return nil
	}
	batch := make([]string, 0, keysBatch)
	var fnErr error
	err := keys.Lines(b.reader(a.stdin), func(_ int, k string) error {
		if !a.allowEdgeSpace {
			if err := keys.CheckEdges(k); err != nil {
				return fmt.Errorf("%w %s", err, edgeSpaceFix)
			}
		}
		batch = append(batch, k)
		if len(batch) == keysBatch {
			if fnErr = use(batch); fnErr != nil {
				return fnErr
			}
			batch = batch[:0]
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if s := b.stopped(); s != nil && err != nil {
		return stoppedKeys(s, used)
	}
	var le *keys.LineError
	if errors.As(err, &le) && errors.Is(err, keys.ErrInvalidKey) {
		if used == 0 {
			return usage("stdin %v; nothing was done", err)
		}
		return usage("stdin %v; the %d keys before it (in batches of %d) were already done, the rest were not", err, used, keysBatch)
	}
	if err != nil {
		return usage("stdin: %v", err)
	}
	if len(batch) > 0 {
		return use(batch)
	}
	return nil
}

// stoppedKeys is eachBatch's exit at stop signal s after used keys: 128+N.
func stoppedKeys(s os.Signal, used int) error {
	return exit(128+sigNumber(s), "%v: the %d keys before it were used, each batch of %d whole (a claim's new keys printed); no later key was: run the same command on the same input again to go on",
		fmt.Errorf("%w (%v)", errKeysStopped, s), used, keysBatch)
}

func (a *app) keysClaimCmd() *cobra.Command {
	var scope string
	var pending, reclaim bool
	c := &cobra.Command{
		Use:   "claim --scope S [--pending] [--reclaim-unknown] [KEY...]",
		Short: "Claim keys; print the ones never claimed before, one a line, in input order",
		Long: `Claim business keys in scope S (stdin, one a line, when no KEY is given) and print the keys that were
never claimed before, one a line, in input order. Concurrent claimers never both print one key. Input
is read, claimed and printed in batches of 1000, so any number of keys runs in bounded memory.

--pending (inside once run) claims the keys for the current run only: finish them with once keys
done. Keys left pending by a run that ended without finishing them are unknown: they are not
printed; they are listed on stderr and the exit status is 76, unless --reclaim-unknown hands them
out (printed) again. A bad key (empty is skipped; newline inside, NUL, control characters, invalid
UTF-8, over 1024 bytes; a space, no-break space or BOM at either end, unless --allow-edge-space)
exits 64 naming its line.`,
		Example: `  # one order per flow, whatever re-runs happen
  list-flows | once keys claim --scope orders | while read -r flow; do insert-order "$flow"; done

  # two-phase, inside once run: claimed, written, then done
  once keys claim --scope orders --pending < flows.txt > todo.txt
  write-orders < todo.txt && once keys done --scope orders < todo.txt`,
		RunE: func(c *cobra.Command, args []string) error {
			if err := a.checkOwnScope(scope); err != nil {
				return err
			}
			req := store.ClaimRequest{Scope: scope}
			if pending {
				cl, err := runClaimant("once keys claim --pending")
				if err != nil {
					return err
				}
				req.Pending, req.Claimant = true, cl
			}
			ks, closeStore, err := a.keysStore(c.Context())
			if err != nil {
				return err
			}
			defer closeStore()
			// The keys are data for a pipe, printed byte for byte (Validate keeps control
			// characters out of them).
			out := bufio.NewWriterSize(a.rawStdout, 64*1024)
			var unknown int
			err = a.eachBatch(args, func(batch []string) error {
				err := claimBatch(c.Context(), ks, req, batch, reclaim, out, func(k store.Key) {
					if unknown < maxUnknownLines {
						fmt.Fprintf(a.stderr, "once: key %q in scope %q is unknown: left pending by run %s, which is gone\n", k.Key, scope, cell(dash(k.RunID)))
					}
					unknown++
				})
				if err != nil {
					return err
				}
				return out.Flush()
			})
			if ferr := out.Flush(); err == nil && ferr != nil {
				err = ferr
			}
			if err != nil {
				return err
			}
			if unknown > 0 {
				return exit(ExitReview, "%d keys in scope %q were left pending by runs that are gone and were not handed out; check whether their work happened, then rerun with --reclaim-unknown to hand them out again (or see once keys status)", unknown, scope)
			}
			return nil
		},
	}
	c.Flags().StringVar(&scope, "scope", "", "the set of keys, e.g. the task name (required)")
	c.Flags().BoolVar(&pending, "pending", false, "claim for the current run only (inside once run); finish with once keys done")
	c.Flags().BoolVar(&reclaim, "reclaim-unknown", false, "hand out again (and print) keys left pending by a run that is gone")
	_ = c.MarkFlagRequired("scope")
	return c
}

// claimBatch claims one batch, prints the keys handed out in input order, and reports the unknown
// keys it did not hand out.
func claimBatch(ctx context.Context, ks store.Keys, req store.ClaimRequest, batch []string, reclaim bool, out io.Writer, onUnknown func(store.Key)) error {
	req.Keys = batch
	got, err := ks.Claim(ctx, req)
	if err != nil {
		return err
	}
	var old []string
	for i, ok := range got {
		if !ok {
			old = append(old, batch[i])
		}
	}
	handed := map[string]bool{}
	if len(old) > 0 {
		found, err := ks.Lookup(ctx, req.Scope, old)
		if err != nil {
			return err
		}
		var unknown []string
		for _, k := range found {
			if k.State == store.KeyUnknown {
				unknown = append(unknown, k.Key)
			}
		}
		if len(unknown) > 0 && reclaim {
			var c *store.Claimant
			if req.Pending {
				c = &req.Claimant
			}
			changed, err := ks.Reclaim(ctx, req.Scope, unknown, c, !req.Pending)
			if err != nil {
				return err
			}
			for _, k := range changed {
				handed[k] = true
			}
		}
		for _, k := range found {
			if k.State == store.KeyUnknown && !handed[k.Key] {
				onUnknown(k)
			}
		}
	}
	for i, k := range batch {
		if got[i] || handed[k] {
			delete(handed, k) // a repeat of a reclaimed key prints once
			if _, err := io.WriteString(out, k+"\n"); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *app) keysDoneCmd() *cobra.Command {
	var scope string
	c := &cobra.Command{
		Use:   "done --scope S [KEY...]",
		Short: "Inside once run: mark keys claimed with --pending by this run as done",
		Long: `Inside a command run by once run: mark keys that this run claimed with once keys claim --pending as
done (stdin, one a line, when no KEY is given). Keys not pending under this run exit 1 and change
nothing in their batch of 1000.`,
		Example: `  once keys done --scope orders < written.txt`,
		RunE: func(c *cobra.Command, args []string) error {
			if err := a.checkOwnScope(scope); err != nil {
				return err
			}
			cl, err := runClaimant("once keys done")
			if err != nil {
				return err
			}
			ks, closeStore, err := a.keysStore(c.Context())
			if err != nil {
				return err
			}
			defer closeStore()
			return a.eachBatch(args, func(batch []string) error {
				err := ks.Complete(c.Context(), scope, batch, cl.RunID, nil)
				if errors.Is(err, store.ErrConflict) {
					return exit(1, "keys not marked done: %v", err)
				}
				return err
			})
		},
	}
	c.Flags().StringVar(&scope, "scope", "", "the set of keys (required)")
	_ = c.MarkFlagRequired("scope")
	return c
}

// keyStatus is one line of once keys status --json.
type keyStatus struct {
	Scope     string `json:"scope"`
	Key       string `json:"key"`
	State     string `json:"state"` // pending, done, unknown, or unclaimed
	RunID     string `json:"run_id,omitempty"`
	ClaimedAt string `json:"claimed_at,omitempty"`
	DoneAt    string `json:"done_at,omitempty"`
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func (a *app) keysStatusCmd() *cobra.Command {
	var scope string
	var asJSON bool
	c := &cobra.Command{
		Use:   "status --scope S [KEY...] [--json]",
		Short: "State of keys: unclaimed, pending, done or unknown (pending under a run that is gone)",
		Example: `  once keys status --scope orders flow-17 flow-18
  once keys status --scope orders --json < flows.txt | jq 'select(.state == "unknown")'`,
		RunE: func(c *cobra.Command, args []string) error {
			if err := a.checkScope(scope); err != nil {
				return err
			}
			ks, closeStore, err := a.keysStoreWith(c.Context(), a.openToRead)
			if err != nil {
				return err
			}
			defer closeStore()
			out := bufio.NewWriter(a.stdout)
			var tw *tabwriter.Writer
			if !asJSON {
				tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "KEY\tSTATE\tRUN ID\tCLAIMED\tDONE")
			}
			err = a.eachBatch(args, func(batch []string) error {
				found, err := ks.Lookup(c.Context(), scope, batch)
				if err != nil {
					return err
				}
				m := make(map[string]store.Key, len(found))
				for _, k := range found {
					m[k.Key] = k
				}
				for _, key := range batch {
					k, ok := m[key]
					st := keyStatus{Scope: scope, Key: key, State: "unclaimed"}
					if ok {
						st = keyStatus{Scope: scope, Key: key, State: string(k.State), RunID: k.RunID, ClaimedAt: rfc3339(k.ClaimedAt), DoneAt: rfc3339(k.DoneAt)}
					}
					if asJSON {
						if err := writeJSONLine(out, st); err != nil {
							return err
						}
						continue
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", key, st.State, cell(dash(st.RunID)), dash(st.ClaimedAt), dash(st.DoneAt))
				}
				if tw != nil {
					return tw.Flush()
				}
				return nil
			})
			if ferr := out.Flush(); err == nil {
				err = ferr // a script reads this output: one it did not get is not a success
			}
			return err
		},
	}
	c.Flags().StringVar(&scope, "scope", "", "the set of keys (required)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object a line: scope, key, state, run_id, claimed_at, done_at")
	_ = c.MarkFlagRequired("scope")
	return c
}

func (a *app) keysForgetCmd() *cobra.Command {
	var scope string
	var older time.Duration
	var includeDone, quiet bool
	c := &cobra.Command{
		Use:   "forget --scope S --older-than D [--include-done] [-q]",
		Short: "Delete keys claimed longer ago than D; done keys only with --include-done",
		Long: `Delete the scope's keys claimed longer ago than D. Done keys, and unknown ones (pending under a
claimant that is gone: their work may have happened), are kept unless --include-done: a forgotten
key is handed out again by the next claim (and once effect calls again without --reconcile), so
forget them only when no re-run can reach back that far. A pending key whose claimant has neither a
run nor an expiry to tell by is forgotten; one pending under a live run is kept, however old, since
its work may be happening now. -q prints nothing unless it fails (cron mails whatever a job prints).`,
		Example: `  once keys forget --scope http --older-than 24h --include-done`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := a.checkOwnScope(scope); err != nil {
				return err
			}
			if older <= 0 {
				return usage("--older-than %s: give a positive duration such as 720h", older)
			}
			ks, closeStore, err := a.keysStore(c.Context())
			if err != nil {
				return err
			}
			defer closeStore()
			// claimed_at is the store's time: the cutoff is too, where the store can tell it.
			now := time.Now()
			if clk, ok := ks.(store.Clock); ok {
				if now, err = clk.Now(c.Context()); err != nil {
					return err
				}
			}
			fctx, stopped := forgetStop(c.Context())
			n, err := ks.Forget(fctx, scope, now.Add(-older), includeDone)
			if s := stopped(); s != nil && err != nil {
				return exit(128+sigNumber(s), "%v: %d keys were forgotten before it, in whole batches (the one under way was rolled back): run the same command again to forget the rest",
					fmt.Errorf("%w (%v)", errKeysStopped, s), n)
			}
			if err != nil && n > 0 { // batched: what went before the error stays forgotten
				return fmt.Errorf("%w (%d keys were forgotten before it; run the command again for the rest)", err, n)
			}
			if err != nil {
				return err
			}
			if !quiet {
				_, err = fmt.Fprintf(a.stdout, "forgot %d keys in scope %s\n", n, scope)
			}
			return err
		},
	}
	c.Flags().StringVar(&scope, "scope", "", "the set of keys (required)")
	c.Flags().Var(coarseDuration{durationFlag{&older, maxOlderThan}}, "older-than",
		"forget keys claimed longer ago than this, e.g. 720h, in hours (required) (at most "+fmtMax(maxOlderThan)+")")
	c.Flags().BoolVar(&includeDone, "include-done", false, "forget done and unknown keys too (they can then be claimed again)")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing unless it fails (a crontab line: cron mails whatever it prints)")
	_ = c.MarkFlagRequired("scope")
	_ = c.MarkFlagRequired("older-than")
	return c
}

func (a *app) keysSchemaCmd() *cobra.Command {
	var dialect, table string
	c := &cobra.Command{
		Use:   "schema --dialect postgres|mysql|sqlite [--table T]",
		Short: "Print the DDL of the keys table for your own database (Go package keys)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			d, err := keys.ParseDialect(dialect)
			if err != nil {
				return usage("--dialect: %v", err)
			}
			ddl, err := keys.Schema(d, table)
			if err != nil {
				return usage("%v", err)
			}
			_, err = io.WriteString(a.stdout, ddl)
			return err
		},
	}
	c.Flags().StringVar(&dialect, "dialect", "", "postgres, mysql or sqlite (required)")
	c.Flags().StringVar(&table, "table", "", "table name (default "+keys.DefaultTable+")")
	_ = c.MarkFlagRequired("dialect")
	return c
}

// writeJSONLine writes v as one line of JSON.
func writeJSONLine(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

// coarseDuration is a duration flag in hours or longer units (checkCoarse): how old a key must be
// to be forgotten.
type coarseDuration struct{ durationFlag }

func (f coarseDuration) Set(s string) error {
	if err := f.durationFlag.Set(s); err != nil {
		// Its advice (30s, 5m, 500ms) is what checkCoarse refuses here; 90d is prune's age.
		if d, werr := parseWindow(s); werr == nil && d > 0 && d <= f.max {
			return fmt.Errorf("%q: give hours here, such as %dh", s, d/time.Hour)
		}
		if strings.Contains(err.Error(), "longer than the maximum") {
			return err
		}
		return fmt.Errorf("%q: give a positive age in hours, such as 720h, 2160h for about three months, or 0h30m", s)
	}
	if *f.d == 0 {
		return nil // 0 is refused by the command, which asks for a positive age
	}
	return checkCoarse(s, "hours, such as 2160h for about three months")
}
