package keys

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		key  string
		ok   bool
		want string
	}{
		{"flow:123", true, ""},
		{"2026-11-29 store 7", true, ""},
		{"订单-42", true, ""},
		{strings.Repeat("x", MaxKeyLen), true, ""},
		{"", false, "empty key"},
		{strings.Repeat("x", MaxKeyLen+1), false, "1025 bytes"},
		{strings.Repeat("x", 10*1024), false, "longer than the 1024-byte limit"},
		{"a\nb", false, "U+000A at byte 1"},
		{"a\x00b", false, "U+0000"},
		{"tab\t", false, "U+0009"},
		{"del\x7f", false, "U+007F"},
		{"c1\u0085", false, "U+0085"},
		{"bad\xffutf8", false, "not valid UTF-8 at byte 3"},
		{"\xed\xa0\x80", false, "not valid UTF-8"}, // surrogate
	} {
		err := Validate(tc.key)
		if tc.ok {
			if err != nil {
				t.Errorf("Validate(%q) = %v, want nil", tc.key, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%.50q) = %v, want ErrInvalidKey containing %q", tc.key, err, tc.want)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\n\r\x00") {
			t.Errorf("error is not one printable line: %q", err)
		}
	}
}

func collect(in string) ([]string, error) {
	var got []string
	err := Lines(strings.NewReader(in), func(n int, k string) error {
		got = append(got, fmt.Sprintf("%d:%s", n, k))
		return nil
	})
	return got, err
}

func TestLines(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		errLine int
		errHas  string
	}{
		{"a\nb\nc\n", "1:a 2:b 3:c", 0, ""},
		{"a\r\nb", "1:a 2:b", 0, ""},
		{"\n\na\n\n", "3:a", 0, ""},
		{"", "", 0, ""},
		{"a\nb\x00c\nd\n", "1:a", 2, "U+0000"},
		{"a\n" + strings.Repeat("k", 10*1024) + "\nz\n", "1:a", 2, "longer than"},
		{strings.Repeat("k", 200*1024), "", 1, "longer than"},
		{"ok\nbad\xfe\n", "1:ok", 2, "UTF-8"},
		{"x\ta\n", "", 1, "U+0009"},
		{strings.Repeat("k", MaxKeyLen) + "\r\n", "1:" + strings.Repeat("k", MaxKeyLen), 0, ""},
	} {
		got, err := collect(tc.in)
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("Lines(%.30q) keys = %.60q, want %.60q", tc.in, g, tc.want)
		}
		if tc.errLine == 0 {
			if err != nil {
				t.Errorf("Lines(%.30q) = %v", tc.in, err)
			}
			continue
		}
		var le *LineError
		if !errors.As(err, &le) || le.Line != tc.errLine || !errors.Is(err, ErrInvalidKey) ||
			!strings.Contains(err.Error(), tc.errHas) || !strings.HasPrefix(err.Error(), fmt.Sprintf("line %d: ", tc.errLine)) {
			t.Errorf("Lines(%.30q) err = %v, want line %d containing %q", tc.in, err, tc.errLine, tc.errHas)
		}
	}
}

func TestLinesCallbackError(t *testing.T) {
	stop := errors.New("stop")
	err := Lines(strings.NewReader("a\nb\n"), func(n int, k string) error {
		if n == 2 {
			return stop
		}
		return nil
	})
	var le *LineError
	if !errors.Is(err, stop) || !errors.As(err, &le) || le.Line != 2 {
		t.Fatalf("err = %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

func TestLinesReadError(t *testing.T) {
	err := Lines(errReader{}, func(int, string) error { return nil })
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v", err)
	}
}

// FuzzValidate: Validate accepts exactly non-empty, bounded, valid UTF-8 without control characters.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{"a", "", "a\nb", "\x00", "\xff", "订单", strings.Repeat("z", MaxKeyLen+1), "\u0085", " "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := Validate(s)
		want := s != "" && len(s) <= MaxKeyLen && utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
		if (err == nil) != want {
			t.Fatalf("Validate(%q) = %v, want ok=%v", s, err, want)
		}
		if err != nil && (!errors.Is(err, ErrInvalidKey) || strings.ContainsAny(err.Error(), "\n\r")) {
			t.Fatalf("Validate(%q) error %q: not a one-line ErrInvalidKey", s, err)
		}
	})
}

// FuzzCheckEdges: CheckEdges refuses exactly the keys that TrimFunc of whitespace and formatting
// characters would change, with a one-line ErrInvalidKey.
func FuzzCheckEdges(f *testing.F) {
	for _, s := range []string{"a", "", " a", "a ", "\ufeffa", "a\u00a0", "a b", "\u3000", "\xff ", " \xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := CheckEdges(s)
		trim := strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.Is(unicode.Cf, r) })
		if (err == nil) != (trim == s) {
			t.Fatalf("CheckEdges(%q) = %v, trimmed %q", s, err, trim)
		}
		if err != nil && (!errors.Is(err, ErrInvalidKey) || strings.ContainsAny(err.Error(), "\n\r")) {
			t.Fatalf("CheckEdges(%q) error %q: not a one-line ErrInvalidKey", s, err)
		}
	})
}

// FuzzLines: every key Lines passes to fn is valid and is a line of the input; on success the keys
// are exactly the non-empty lines (CR stripped).
func FuzzLines(f *testing.F) {
	for _, s := range []string{"a\nb\n", "a\r\n\r\nb", "\x00\n", "x\xff\n", strings.Repeat("y", 3000) + "\n", "", "\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var got []string
		last := 0
		err := Lines(strings.NewReader(s), func(n int, k string) error {
			if n <= last {
				t.Fatalf("line numbers not increasing: %d after %d", n, last)
			}
			last = n
			if verr := Validate(k); verr != nil {
				t.Fatalf("Lines passed invalid key %q: %v", k, verr)
			}
			got = append(got, k)
			return nil
		})
		var want []string
		for _, l := range strings.Split(s, "\n") {
			l = strings.TrimSuffix(l, "\r")
			if l != "" {
				want = append(want, l)
			}
		}
		if err == nil {
			if strings.Join(got, "\n") != strings.Join(want, "\n") || len(got) != len(want) {
				t.Fatalf("Lines(%q) = %q, want %q", s, got, want)
			}
		} else {
			var le *LineError
			if !errors.As(err, &le) || !errors.Is(err, ErrInvalidKey) || strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("Lines(%q) error %q: want a one-line *LineError wrapping ErrInvalidKey", s, err)
			}
			if len(got) > len(want) {
				t.Fatalf("more keys than lines")
			}
		}
	})
}
