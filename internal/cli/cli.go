// Package cli is the once command line: flags, output and exit codes. Deciding whether to run lives
// in package once; running a command as the guarded work lives in package job.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/once-run/once"
	"github.com/once-run/once/flock"
	"github.com/once-run/once/internal/telemetry"
	"github.com/once-run/once/store"

	// Stores compiled into the command.
	_ "github.com/once-run/once/store/mysql"
	_ "github.com/once-run/once/store/postgres"
	"github.com/once-run/once/store/sqlite"
)

// Exit codes of the contract (../shared/spec/cli.md).
const (
	ExitOK            = 0
	ExitUsage         = 64
	ExitUnavailable   = 69
	ExitInternal      = 70
	ExitBusy          = 75
	ExitReview        = 76
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// exitError carries an exit code and the one line to print (empty: print nothing).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func exit(code int, format string, a ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, a...)}
}

func usage(format string, a ...any) error { return exit(ExitUsage, format, a...) }

// app is the state shared by the commands of one invocation.
type app struct {
	stdin io.Reader
	// stdout and stderr carry everything once prints, escaped for terminals (text.go).
	stdout, stderr io.Writer
	// rawStdout and rawStderr are the streams as given: the output of the commands once runs.
	rawStdout, rawStderr io.Writer
	storeFlag            string
	passwordFlag         string // --store-password-file
	logFormat            string
	logLevel, logFile    string             // --log-level, --log-file (logging.go)
	verbose              int                // -v
	log                  *slog.Logger       // the one logger, once made (see logger)
	sinkLog              *slog.Logger       // the log file or syslog alone, with --log-file
	closers              []io.Closer        // the log file or syslog connection
	tracing              *telemetry.Tracing // OpenTelemetry, when the environment asks (telemetry.go)
	traceStarted         bool
	refused              error    // a flag value strictFlags refused
	allowEdgeSpace       bool     // once keys and once effect --allow-edge-space (keys.go)
	args                 []string // the command line as given (checkFlags)
}

// Run runs the once command line with args (without the program name) and returns the exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	out, errOut := newEscWriter(stdout), newEscWriter(stderr)
	defer out.Flush()
	defer errOut.Flush()
	a := &app{stdin: stdin, stdout: out, stderr: errOut, rawStdout: stdout, rawStderr: stderr, args: args}
	root := a.rootCmd()
	root.InitDefaultCompletionCmd() // here, so that the walks below see it too
	strictFlags(root, &a.refused)
	refuseUnknownSubcommands(root)
	refuseUnknownHelpTopics(root)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(out)
	root.SetErr(errOut)
	defer a.closeLog()
	cmd, err := root.ExecuteContextC(ctx)
	a.tracing.Shutdown() // the last spans, bounded: before the exit, which it never changes
	if err == nil {
		return ExitOK
	}
	code, msg := classify(err)
	if code == ExitUnavailable && !runsCommands(cmd) {
		msg = strings.TrimSuffix(msg, notRunTail) // a read, a resolve, a pause: nothing to run
	}
	if msg != "" {
		fmt.Fprintln(errOut, "once: "+msg)
		if a.sinkLog != nil { // the log file has the reason too, not only cron's mail
			a.sinkLog.Error(msg, "exit_code", code)
		}
	}
	return code
}

// Command is once's command tree, for tools that document it: the release build generates the man
// pages and the shell completions from it. Executing it is not supported (use Run).
func Command() *cobra.Command {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, rawStdout: io.Discard, rawStderr: io.Discard}
	return a.rootCmd()
}

// classify maps an error to an exit code and its one line, in one place.
func classify(err error) (int, string) {
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.code, ee.msg
	case errors.Is(err, once.ErrInvalid), errors.Is(err, store.ErrBadDSN), errors.Is(err, store.ErrInvalid),
		errors.Is(err, store.ErrUnsupported):
		return ExitUsage, err.Error()
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, flock.ErrUnsafe), errors.Is(err, flock.ErrUnusable):
		return ExitUnavailable, err.Error() + notRunTail
	case isFlagError(err):
		return ExitUsage, err.Error()
	}
	return ExitInternal, "internal error: " + err.Error()
}

// notRunTail ends the line of a command that runs commands (runsCommands) and exits 69.
const notRunTail = " (nothing was run)"

// runsCommands reports whether cmd is one that runs a command or a job (run, backfill, daemon,
// drill, effect): its exit 69 says "(nothing was run)", which the other commands' 69 (a read, a
// resolve, a pause) has nothing to do with.
func runsCommands(cmd *cobra.Command) bool {
	for ; cmd != nil; cmd = cmd.Parent() {
		switch cmd.Name() {
		case "run", "backfill", "daemon", "drill", "effect":
			return cmd.Parent() != nil && !cmd.Parent().HasParent()
		}
	}
	return false
}

func isFlagError(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown flag", "unknown shorthand", "flag needs an argument", "invalid argument",
		"unknown command", "accepts ", "requires at least", "required flag", "if any flags in the group"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "once",
		Short: "Run scheduled jobs once: never two at a time, never twice per slot, never silently lost",
		Long: `once runs a command under a kernel file lock, a lease in a shared store (with a fencing token)
and a run ledger per slot, so that a job started twice by cron, systemd, Kubernetes or a person runs once.

Store: --store DSN, else $ONCE_STORE, else the embedded SQLite file $ONCE_HOME/once.db.
Its password: in the DSN, or in --store-password-file FILE ($ONCE_STORE_PASSWORD_FILE).`,
		Example: `  # at most one at a time, and at most once successfully per day
  once run --task nightly-sync --per day -- /usr/local/bin/sync-orders

  # what ran, when, with what result
  once history --task nightly-sync`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Every command: a flag given with an empty value is refused, not taken as absent.
		PersistentPreRunE: func(c *cobra.Command, _ []string) error { return checkFlags(c, a.args) },
	}
	root.PersistentFlags().StringVar(&a.storeFlag, "store", "", "store DSN (default $ONCE_STORE, else sqlite in $ONCE_HOME)")
	root.PersistentFlags().StringVar(&a.passwordFlag, "store-password-file", "", "read the store's password from FILE (mode 0600, yours), keeping it out of --store, ps and the job's environment (env ONCE_STORE_PASSWORD_FILE)")
	root.PersistentFlags().StringVar(&a.logFormat, "log-format", "text", "format of once's own log lines on stderr: text or json")
	root.PersistentFlags().StringVar(&a.logLevel, "log-level", "", "debug, info, warn or error (env ONCE_LOG_LEVEL; default info on a terminal, else warn: a run that succeeds, skips or is busy prints nothing under cron)")
	root.PersistentFlags().CountVarP(&a.verbose, "verbose", "v", "-v logs at info (every start, end, skip and busy), -vv at debug")
	root.PersistentFlags().StringVar(&a.logFile, "log-file", "", "also append once's log lines, at info unless --log-level says otherwise, to FILE, or to the local syslog with 'syslog' (env ONCE_LOG_FILE)")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// A number or duration flag given empty ("--max-attempts=$N", N unset): say so, as for
		// the string flags (checkFlags), not strconv's words.
		if m := emptyArg.FindStringSubmatch(err.Error()); m != nil {
			return usage("--%s is given but empty (an unset variable?): give a value, or leave --%s out for its default (see '%s --help')", m[1], m[1], c.CommandPath())
		}
		if a.refused != nil && strings.HasSuffix(err.Error(), ": "+a.refused.Error()) {
			return usage("%v", a.refused) // it names the flag: pflag's "invalid argument" words add nothing
		}
		return usage("%v (see '%s --help')", err, c.CommandPath())
	})
	root.AddCommand(a.runCmd(), a.statusCmd(), a.historyCmd(), a.resolveCmd(), a.reportCmd(), a.versionCmd(),
		a.backfillCmd(), a.drillCmd(), a.doctorCmd(), a.keysCmd(), a.effectCmd(), a.pruneCmd(), a.daemonCmd(),
		a.jobsCmd(), a.pauseCmd(), a.resumeCmd(), a.triggerCmd(), a.logsCmd(), a.serveCmd())
	return root
}

// dsn resolves the store DSN: --store, $ONCE_STORE, the embedded default. It is the DSN as given:
// a password from --store-password-file is never in it (see openStore). ONCE_STORE set but empty
// (an unset $DSN expanded into a crontab or unit) is refused rather than taken as absent: falling
// back to the local SQLite file would drop the exclusion across machines without a word.
func (a *app) dsn() (string, error) {
	if a.storeFlag != "" {
		return a.storeFlag, nil
	}
	if s, set := os.LookupEnv("ONCE_STORE"); set {
		if s == "" {
			return "", usage("ONCE_STORE is set but empty: unset it to use the embedded store, or give a DSN")
		}
		return s, nil
	}
	h, err := home()
	if err != nil {
		return "", err
	}
	return defaultStore(h), nil
}

// defaultStore is the DSN of the embedded store under home, its path percent-encoded where a DSN
// needs it (sqlite.FileDSN: '%', '?', '#', spaces, '$'), so that any directory name gives the file
// it names.
func defaultStore(home string) string {
	return sqlite.FileDSN(filepath.Join(home, "once.db"))
}

// open opens the store the flags name. The DSN it returns is the one given (see dsn).
func (a *app) open(ctx context.Context) (store.Store, string, error) {
	return a.openWith(ctx, a.openStore)
}

// openToRead is open for a command that only reads the store (see openStoreToRead).
func (a *app) openToRead(ctx context.Context) (store.Store, string, error) {
	return a.openWith(ctx, a.openStoreToRead)
}

func (a *app) openWith(ctx context.Context, open func(context.Context, string) (store.Store, error)) (store.Store, string, error) {
	dsn, err := a.dsn()
	if err != nil {
		return nil, "", err
	}
	s, err := open(ctx, dsn)
	if err != nil {
		return nil, "", err
	}
	return s, dsn, nil
}

// emptyArg matches pflag's error for a flag given an empty value it cannot parse.
var emptyArg = regexp.MustCompile(`^invalid argument "" for "(?:-\w, )?--([\w-]+)" flag`)

// refuseUnknownHelpTopics makes `once help WORD` refuse (64) a WORD that names no command: cobra
// printed "Unknown help topic" and the usage, and exited 0.
func refuseUnknownHelpTopics(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	for _, h := range root.Commands() {
		if h.Name() != "help" || h.Run == nil {
			continue
		}
		show := h.Run
		h.Run = nil
		h.RunE = func(c *cobra.Command, args []string) error {
			if cmd, rest, err := c.Root().Find(args); len(args) > 0 && (err != nil || cmd == nil || len(rest) > 0) {
				return usage("unknown help topic %q: give a command, e.g. 'once help run' (see 'once help')", strings.Join(args, " "))
			}
			show(c, args)
			return nil
		}
	}
}

// refuseUnknownSubcommands makes a command below the root that only groups others (once keys,
// once completion) refuse (64) an argument that names none of them. cobra printed the help and
// exited 0: a typo'd `once keys forgt` in a crontab did nothing without a word, `once keys clam K`
// printed the help on stdout, where a script reads the keys claimed, and `once completion bsh >
// file` wrote the help as the script. Without an argument it prints the help, as before.
func refuseUnknownSubcommands(c *cobra.Command) {
	if c.HasParent() && c.HasSubCommands() && !c.Runnable() {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				if c.SuggestionsMinimumDistance <= 0 {
					c.SuggestionsMinimumDistance = 2 // cobra's default, set only by its own root check
				}
				if s := c.SuggestionsFor(args[0]); len(s) > 0 {
					return usage("unknown command %q for %q: did you mean %s? (see '%s --help')", args[0], c.CommandPath(), strings.Join(s, " or "), c.CommandPath())
				}
				return usage("unknown command %q for %q: give one of its commands (see '%s --help')", args[0], c.CommandPath(), c.CommandPath())
			}
			return c.Help()
		}
	}
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
}
