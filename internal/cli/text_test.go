package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/once-run/once/store"
)

func TestEscWriter(t *testing.T) {
	for in, want := range map[string]string{
		"plain\tline\n":                 "plain\tline\n",
		"title \x1b]0;pwned\x07 here\n": `title \x1b]0;pwned\x07 here` + "\n",
		"clear \x1b[2J\r":               `clear \x1b[2J\x0d`,
		"c1 \u009b31m del \x7f":         `c1 \u009b31m del \u007f`,
		"bidi \u202eexe.txt":            `bidi \u202eexe.txt`,
		"tag \U000e0041":                `tag \udb40\udc41`,
		"bad \xff\xfe":                  `bad \xff\xfe`,
		"日本語 ok ✓ 😀":                    "日本語 ok ✓ 😀",
	} {
		var b bytes.Buffer
		w := newEscWriter(&b)
		w.Write([]byte(in))
		w.Flush()
		if b.String() != want {
			t.Errorf("%q: got %q, want %q", in, b.String(), want)
		}
	}
}

// A character split across writes (bufio, tabwriter) comes out whole; one left incomplete at
// the end is escaped by Flush.
func TestEscWriterSplitCharacters(t *testing.T) {
	in := []byte("a日b😀c\u202e")
	for cut := 0; cut <= len(in); cut++ {
		var b bytes.Buffer
		w := newEscWriter(&b)
		w.Write(in[:cut])
		w.Write(in[cut:])
		w.Flush()
		if got := b.String(); got != `a日b😀c\u202e` {
			t.Errorf("cut at %d: %q", cut, got)
		}
	}
	var b bytes.Buffer
	w := newEscWriter(&b)
	w.Write([]byte("x\xe6\x97"))
	if b.String() != "x" {
		t.Errorf("held back: %q", b.String())
	}
	w.Flush()
	if b.String() != `x\xe6\x97` {
		t.Errorf("flushed: %q", b.String())
	}
}

// JSON through the writer is still JSON, with the same values, and no raw control character.
func TestEscWriterKeepsJSON(t *testing.T) {
	v := map[string]string{"holder": "h\x1b]0;x\x07", "note": "a\u009bb\x7fc\u202ed\U000e0041\n", "bad": "\xff"}
	var b bytes.Buffer
	w := newEscWriter(&b)
	if err := writeJSON(w, v); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	var got map[string]string
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b.String())
	}
	for k := range v {
		if want := strings.ToValidUTF8(v[k], "\uFFFD"); got[k] != want {
			t.Errorf("%s: %q, want %q", k, got[k], want)
		}
	}
	if strings.ContainsAny(b.String(), "\x1b\x07\x7f\u009b\u202e") {
		t.Errorf("raw control characters in %q", b.String())
	}
}

func TestCell(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain", "a\tb\nc": `a\tb\nc`, "x\x1b[2J": `x\x1b[2J`, "ü": "ü",
	} {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %q, want %q", in, got, want)
		}
	}
	if got := oneLineText("one\r\ntwo\nthree\x1b"); got != `one two three\x1b` {
		t.Errorf("oneLineText: %q", got)
	}
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "a\x1bb", "日本", "\xff", "\u202e", "😀", "\t\n"} {
		f.Add(s, 1)
	}
	f.Fuzz(func(t *testing.T, s string, cut int) {
		var b bytes.Buffer
		w := newEscWriter(&b)
		if cut < 0 || cut > len(s) {
			cut = len(s) / 2
		}
		w.Write([]byte(s[:cut]))
		w.Write([]byte(s[cut:]))
		w.Flush()
		out := b.String()
		if !utf8.ValidString(out) {
			t.Fatalf("%q: output %q is not UTF-8", s, out)
		}
		for _, r := range out {
			if !store.Printable(r) && r != '\t' && r != '\n' {
				t.Fatalf("%q: output %q has %U", s, out, r)
			}
		}
		if c := cell(s); strings.ContainsAny(c, "\t\n") || !utf8.ValidString(c) {
			t.Fatalf("cell(%q) = %q", s, c)
		}
	})
}
