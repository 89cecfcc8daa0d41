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
