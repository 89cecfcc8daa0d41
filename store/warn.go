package store

import (
	"log/slog"
	"sync"
)

var warned sync.Map // message → struct{}: what Warn already said in this process

// Warn reports a problem a store found with itself while working (e.g. Redis without persistence),
// at most once per process for each message, through log/slog's default logger: the CLI makes that
// its own, so the line comes out in --log-format. check names the doctor check it belongs to
// ("durability", …) and is logged as the attribute "check"; msg is one line, without passwords.
// A store that also reports the problem from Inspect should use the same message there, so that a
// caller collecting both (once doctor) shows it once.
func Warn(check, msg string) {
	if _, dup := warned.LoadOrStore(msg, struct{}{}); dup {
		return
	}
	slog.Default().Warn(msg, "check", check)
}
