package shell

import "testing"

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"orders": "orders", "a/b-c.d": "a/b-c.d", "": "''", "a b": "'a b'", "it's": `'it'\''s'`, "$(x)": "'$(x)'",
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}

// A task or slot that starts with '-' is written --task=VALUE: once refuses a separate value that
// is one of the command's flags (a task named --as).
func TestResolveDashNames(t *testing.T) {
	if got, want := Resolve("--as", "-", "failed", ""), "once resolve --task=--as --slot=- --as failed"; got != want {
		t.Errorf("Resolve = %s, want %s", got, want)
	}
	if got, want := Resolve("t", "a b", "failed", ""), "once resolve --task t --slot 'a b' --as failed"; got != want {
		t.Errorf("Resolve = %s, want %s", got, want)
	}
}
