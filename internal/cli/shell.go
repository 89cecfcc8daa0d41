package cli

import (
	"os"

	"github.com/once-run/once/internal/shell"
	"github.com/once-run/once/notify"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
)

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string { return shell.Quote(s) }

// Commands a person pastes. Each is one complete shell line that records exactly the decision
// it names: arguments are shell-quoted, and the store is named whenever the user's default
// would not find it. A password is never printed: the DSN is redacted (store.Redact), and
// once refuses (64) a --store whose password is the redaction mark (store.IsRedacted), so a
// line pasted as it is records nothing and tries no wrong password on the server; the message
// says to put the password back, or to set ONCE_STORE and leave --store out.

// storeArg is " --store DSN" (redacted, quoted) for the store at dsn, or "" when a shell of the
// same user with none of once's variables set would open it anyway: the embedded store in the
// default ONCE_HOME.
func (a *app) storeArg(dsn string) string {
	if a.storeName(dsn) == "" {
		return ""
	}
	return " --store " + shellQuote(a.storeName(dsn))
}

// storeName is the store's DSN redacted, or "" when storeArg leaves --store out. A SQLite DSN's
// relative path is made absolute: the line is pasted in another working directory. XDG_STATE_HOME
// (a crontab's) moves the default ledger of a user other than root: a login shell without it opens
// ~/.local/state/once.
func (a *app) storeName(dsn string) string {
	if a.storeFlag == "" && os.Getenv("ONCE_STORE") == "" && os.Getenv("ONCE_HOME") == "" &&
		(os.Geteuid() == 0 || os.Getenv("XDG_STATE_HOME") == "") {
		return ""
	}
	return store.Redact(sqlite.AbsoluteDSN(dsn))
}

// hiddenPassword is a line to print under commands whose --store lost its password to
// redaction, or "".
func (a *app) hiddenPassword(dsn string) string {
	if a.storeArg(dsn) == "" || store.Redact(dsn) == dsn {
		return ""
	}
	return "(the store's password is shown as " + store.RedactedPassword + ": write it in its place, or set ONCE_STORE and leave --store out)"
}

// resolveCommand is the once resolve line that records as (store.Failed: run the slot again;
// store.Succeeded: it is done) for task and slot in the store at dsn.
func (a *app) resolveCommand(dsn, task, slot string, as store.State) string {
	return shell.Resolve(task, slot, string(as), a.storeName(dsn))
}

// resolveCommands is both decisions on a slot waiting for review.
func (a *app) resolveCommands(dsn, task, slot string) *notify.Resolve {
	return &notify.Resolve{Failed: a.resolveCommand(dsn, task, slot, store.Failed), Succeeded: a.resolveCommand(dsn, task, slot, store.Succeeded)}
}
