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
		for k, vs := range u.Query() {
			for _, v := range vs {
				if v == RedactedPassword && secretKey(k) {
					return true
				}
			}
		}
	}
	for _, f := range strings.Fields(dsn) { // key=value DSNs: password=xxxxx
		if k, v, ok := strings.Cut(f, "="); ok && strings.Trim(v, `'"`) == RedactedPassword && secretKey(k) {
			return true
		}
	}
	return false
}

// secretKey reports whether a DSN parameter named k holds a secret (password, sslpassword, pwd,
// token, secret), the parameters Redact hides; ?prefix=xxxxx is only a prefix.
func secretKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"pass", "pwd", "token", "secret"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}
