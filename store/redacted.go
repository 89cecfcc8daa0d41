package store

import (
	"net/url"
	"strings"
)

// RedactedPassword is what Redact puts where a password was.
const RedactedPassword = "xxxxx"

// IsRedacted reports whether dsn carries RedactedPassword where a password goes: a DSN copied
// from once's own output (a resolve command, doctor), whose password once hid. Such a DSN must
// not be used as it is: it would try a wrong password on the server.
func IsRedacted(dsn string) bool {
	if strings.Contains(dsn, "://"+RedactedPassword+"@") {
		return true
	}
	if u, err := url.Parse(dsn); err == nil {
		if p, ok := u.User.Password(); ok && p == RedactedPassword {
			return true
		}
		for _, vs := range u.Query() {
			for _, v := range vs {
				if v == RedactedPassword {
					return true
				}
			}
		}
	}
	for _, f := range strings.Fields(dsn) { // key=value DSNs: password=xxxxx
		if _, v, ok := strings.Cut(f, "="); ok && strings.Trim(v, `'"`) == RedactedPassword {
			return true
		}
	}
	return false
}
