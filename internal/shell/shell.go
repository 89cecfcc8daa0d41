// Package shell quotes words for a POSIX shell: the commands once prints for a person to paste
// (the CLI's hints, the dashboard's).
package shell

import "strings"

// Quote quotes s for a POSIX shell when it needs quoting: a word of only letters, digits and
// ._:@/-=+, stays as it is; anything else is single-quoted.
func Quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:@/-=+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Resolve is the once resolve line that records as ("failed": run the slot again; "succeeded": it
// is done) for task and slot, with --store DSN when dsn is not "" (give it redacted: a password is
// never printed).
func Resolve(task, slot, as, dsn string) string {
	line := "once resolve " + Flag("task", task) + " " + Flag("slot", slot) + " --as " + Quote(as)
	if dsn != "" {
		line += " --store " + Quote(dsn)
	}
	return line
}

// Flag is --name VALUE, quoted, or --name=VALUE when VALUE starts with '-' (a task named --as):
// once refuses a separate value that is one of the command's flags.
func Flag(name, v string) string {
	if strings.HasPrefix(v, "-") {
		return "--" + name + "=" + Quote(v)
	}
	return "--" + name + " " + Quote(v)
}
