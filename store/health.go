package store

import "context"

// Level grades a Finding.
type Level string

// Levels, from good to bad. once doctor exits 1 when any finding is LevelWarn or LevelFail.
const (
	LevelOK   Level = "ok"   // checked and fine
	LevelInfo Level = "info" // worth knowing, not a problem (e.g. a check this store cannot make)
	LevelWarn Level = "warn" // a problem that needs attention but does not break the guarantees yet
	LevelFail Level = "fail" // the guarantees are at risk (e.g. SQLite on a network filesystem)
)

// Finding is one line of a health report (once doctor).
type Finding struct {
	Check   string `json:"check"` // what was checked: "schema", "durability", "clock", …
	Level   Level  `json:"level"`
	Message string `json:"message"` // one line; says how to fix a problem; no passwords
	Task    string `json:"task,omitempty"`
	// Command, when set, is one complete shell line that acts on the finding (doctor's
	// resolve commands), printed after the message.
	Command string `json:"command,omitempty"`
}

// Inspector is implemented by stores that can report on their own health for once doctor: the
// schema version and the durability they give (persistence settings, the filesystem under a
// file). Inspect only reads; an error means the store could not be inspected at all.
type Inspector interface {
	Inspect(ctx context.Context) ([]Finding, error)
}

type fullCheck struct{}

// WithFullCheck asks Inspect for its heavy checks (once doctor --scan): those that read the whole
// ledger where the default reads a window of it (the key-value stores' history-index check reads
// every document, not the documents of each task's newest entries). Inspect without it stays
// flat in the ledger's size.
func WithFullCheck(ctx context.Context) context.Context {
	return context.WithValue(ctx, fullCheck{}, true)
}

// FullCheck says whether ctx asks for the heavy checks (WithFullCheck).
func FullCheck(ctx context.Context) bool {
	v, _ := ctx.Value(fullCheck{}).(bool)
	return v
}
