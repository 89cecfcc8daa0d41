package cli

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzHomeEnv: ONCE_HOME, whatever it holds, names the state directory as written (an absolute,
// clean path with nothing a reader of a crontab would not see, no '~' or '$' taken literally), or
// is refused with a usage error (64) in one line. A ledger chosen by a value read otherwise would
// be another ledger, where a slot already done runs again.
func FuzzHomeEnv(f *testing.F) {
	for _, s := range []string{"/var/lib/once", "", "rel/dir", "~/once", "$HOME/once", "/x ", " /x", "/x\n", "/a/\u200b", "/a/../b/", "/\ufeffx", "//x//y/", "/x\x00y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		if strings.IndexByte(h, 0) >= 0 {
			return // no environment variable holds a NUL
		}
		t.Setenv("ONCE_HOME", h)
		got, err := home()
		if err != nil {
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != ExitUsage || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("ONCE_HOME=%q: %#v", h, err)
			}
			return
		}
		if !filepath.IsAbs(got) || got != filepath.Clean(h) || unseen(h) || strings.HasPrefix(h, "~") || strings.Contains(h, "$") {
			t.Fatalf("ONCE_HOME=%q read as %q", h, got)
		}
	})
}
