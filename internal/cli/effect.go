package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/once-run/once/effect"
	"github.com/once-run/once/job"
	"github.com/once-run/once/store"
	"github.com/once-run/once/supervise"
)

func (a *app) effectCmd() *cobra.Command {
	var key, scope, reconcile string
	var claimTTL time.Duration
	c := &cobra.Command{
		Use:   "effect --key K [--scope S] [--reconcile CMD] [--claim-ttl D] -- COMMAND [ARG...]",
		Short: "Call COMMAND at most once per key (a payment, an e-mail, a POST downstream)",
		Long: `Call COMMAND at most once per key, with ONCE_EFFECT_KEY=K in its environment (send it downstream as
the Idempotency-Key header). The scope defaults to $ONCE_TASK, else "effect".

  key done before                       → exit 0 without calling
  key new                               → call; exit 0 marks it done; a non-zero exit releases the
                                          claim (a failed call is taken as not applied) and passes
                                          the exit status through, so a retry calls again
  key new, COMMAND killed by a signal   → exit 128+N and keep the claim: the call may have happened,
                                          so it is reconciled as one that died mid-call
  an earlier attempt died mid-call      → run CMD with sh -c: exit 0 = it happened (mark done, do
                                          not call), 1 = it did not (call); else, or without
                                          --reconcile, exit 76 and print how to decide
  another attempt is calling now        → exit 75

Inside once run the claim belongs to the run (gone when its lease ends). Outside, it expires after
--claim-ttl, which must outlast the call: past it, the call counts as died mid-call.`,
		Example: `  once effect --key "invoice-$ID" --reconcile "./invoice-exists $ID" -- ./send-invoice "$ID"`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 0 {
				return usage("put COMMAND after --: once effect --key K -- COMMAND")
			}
			if err := a.checkKey(key); err != nil {
				return usage("--key: %v", err)
			}
			if scope == "" {
				scope = os.Getenv("ONCE_TASK")
			}
			if scope == "" {
				scope = "effect"
			}
			if err := a.checkOwnScope(scope); err != nil {
				return err
			}
			if claimTTL < time.Second {
				return usage("--claim-ttl %s: give at least 1s, longer than the call can take", claimTTL)
			}
			return a.effect(c.Context(), args, scope, key, reconcile, claimTTL)
		},
	}
	c.Flags().StringVar(&key, "key", "", "the effect's key, e.g. invoice-42 (required)")
	c.Flags().StringVar(&scope, "scope", "", `the set of keys (default $ONCE_TASK, else "effect")`)
	c.Flags().BoolVar(&a.allowEdgeSpace, "allow-edge-space", false, allowEdgeSpaceUsage)
	c.Flags().StringVar(&reconcile, "reconcile", "", "shell command that tells whether an interrupted call happened: exit 0 yes, 1 no")
	durationVar(c.Flags(), &claimTTL, "claim-ttl", 10*time.Minute, maxClaimTTL, "outside once run: how long the claim lasts; must outlast the call")
	_ = c.MarkFlagRequired("key")
	return c
}

// effect calls COMMAND (args) for key in scope unless it was done, and maps the outcome to once
// effect's exit.
func (a *app) effect(ctx context.Context, args []string, scope, key, reconcile string, claimTTL time.Duration) error {
	cl, err := effectClaimant(claimTTL)
	if err != nil {
		return err
	}
	ks, closeStore, err := a.keysStore(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	var rec effect.Reconciler
	if reconcile != "" {
		rec = effect.ReconcilerFunc(func(ctx context.Context, scope, key string) (bool, error) {
			return a.reconcile(ctx, reconcile, scope, key)
		})
	}
	out, err := effect.Do(ctx, ks, scope, key, cl, func(ctx context.Context) error {
		return a.callEffect(args, scope, key)
	}, rec)
	switch {
	case out == effect.AlreadyDone || out == effect.Reconciled:
		fmt.Fprintf(a.stderr, "once: effect %q in scope %q already happened (%s); not calling\n", key, scope, out)
		return nil
	case errors.Is(err, effect.ErrUnknown):
		redo := "once effect --key " + shellQuote(key) + " --scope " + shellQuote(scope)
		fmt.Fprintf(a.stderr, "once: %v\n", err)
		fmt.Fprintf(a.stderr, "once: check downstream, then:  %s --reconcile 'exit 0' -- …  (it happened)  or  --reconcile 'exit 1' (call again)\n", redo)
		return exit(ExitReview, "")
	case errors.Is(err, effect.ErrInFlight):
		return exit(ExitBusy, "%v", err)
	case out == effect.Called && err != nil:
		// COMMAND ran and succeeded; only the done mark failed. Its status stands (69 says nothing
		// was run): the key turns unknown, so a retry is not a blind second call.
		fmt.Fprintf(a.stderr, "once: %v; COMMAND succeeded, so key %q in scope %q is kept: retries get 75 until this claim ends (%s), then 76: decide with --reconcile 'exit 0'\n",
			err, key, scope, claimEnd())
		return nil
	case out == effect.Interrupted:
		// Killed mid-call: the effect may have happened, so the key is kept, not released.
		fmt.Fprintf(a.stderr, "once: %v; key %q in scope %q stays claimed and turns unknown when this claim ends (%s): then decide with --reconcile\n",
			err, key, scope, claimEnd())
		var ec job.ExitError
		if errors.As(err, &ec) {
			return exit(ec.Code, "")
		}
		return exit(ExitInternal, "")
	}
	var ec job.ExitError
	if out == effect.Failed && errors.As(err, &ec) {
		if msg := err.Error(); msg != ec.Error() {
			// The claim could not be given back: retries get 75, then 76, and should know why.
			fmt.Fprintf(a.stderr, "once: effect %q in scope %q: COMMAND failed: %s; retries get 75 until this claim ends (%s), then 76: decide with --reconcile\n", key, scope, msg, claimEnd())
		}
		return exit(ec.Code, "") // COMMAND's own status; the claim was released
	}
	return err
}

// claimEnd says when this process's claim ends: with the run, or at its --claim-ttl.
func claimEnd() string {
	if os.Getenv("ONCE_RUN_ID") != "" {
		return "when this run ends"
	}
	return "after --claim-ttl"
}

// effectClaimant is the current run (inside once run) or a fresh expiring claim.
func effectClaimant(ttl time.Duration) (store.Claimant, error) {
	if os.Getenv("ONCE_RUN_ID") != "" {
		return runClaimant("once effect")
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return store.Claimant{}, err
	}
	return store.Claimant{RunID: "effect-" + hex.EncodeToString(b[:]), Expires: ttl}, nil
}

// callEffect runs COMMAND in its own process group with ONCE_EFFECT_KEY set, forwarding SIGINT,
// SIGTERM, SIGHUP and SIGQUIT (left to Go, SIGQUIT dumped the goroutines and exited 2); a non-zero exit is returned as job.ExitError. A COMMAND killed by a signal
// (by once's own forwarding too) or whose end is not known may have made the call: that error also
// wraps effect.ErrMaybeApplied, so the claim is kept instead of released for a blind retry.
func (a *app) callEffect(args []string, scope, key string) error {
	env := append(os.Environ(), "ONCE_EFFECT_KEY="+key, "ONCE_EFFECT_SCOPE="+scope)
	sigs := make(chan os.Signal, 1)
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		if !signal.Ignored(s) { // ignored at start (nohup, a script's background job): it stays so, as for once run
			signal.Notify(sigs, s)
		}
	}
	defer signal.Stop(sigs)
	_ = supervise.BecomeSubreaper() // nothing the call starts escapes to init, even if it kills its shim
	p, err := supervise.Start(supervise.Config{Args: args, Env: env, Stdin: a.stdin, Stdout: a.rawStdout, Stderr: a.rawStderr,
		Shim: supervise.DefaultShim()})
	if err != nil {
		fmt.Fprintf(a.stderr, "once: %v\n", err)
		if code, ok := job.StartExit(err); ok {
			return job.ExitError{Code: code}
		}
		return err
	}
	go func() {
		for {
			select {
			case s := <-sigs:
				p.Stop(s.(syscall.Signal), 10*time.Second)
			case <-p.Done():
				return
			}
		}
	}()
	ex, err := p.Wait()
	if err != nil {
		return fmt.Errorf("%w: %w", effect.ErrMaybeApplied, err)
	}
	if ex.Signal != 0 {
		return fmt.Errorf("%w: COMMAND was killed by signal %d (%v): %w", effect.ErrMaybeApplied, int(ex.Signal), ex.Signal, job.ExitError{Code: ex.Code})
	}
	if ex.Code != 0 {
		return job.ExitError{Code: ex.Code}
	}
	return nil
}

// reconcile runs CMD with sh -c: exit 0 means the effect happened, 1 that it did not.
func (a *app) reconcile(ctx context.Context, cmd, scope, key string) (bool, error) {
	c := exec.CommandContext(ctx, "/bin/sh", "-c", cmd)
	c.Env = append(os.Environ(), "ONCE_EFFECT_KEY="+key, "ONCE_EFFECT_SCOPE="+scope)
	c.Stdout, c.Stderr = a.rawStderr, a.rawStderr
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return false, nil
	case errors.As(err, &ee):
		return false, fmt.Errorf("--reconcile %q exited %d (0 means it happened, 1 that it did not)", cmd, ee.ExitCode())
	}
	return false, fmt.Errorf("--reconcile %q: %v", cmd, err)
}
