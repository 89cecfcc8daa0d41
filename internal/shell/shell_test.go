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
