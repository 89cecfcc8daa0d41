package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/once-run/once/store"
)

// Operators' terminals. Holders, notes, checkpoints and slot values come from the store, where
// anyone who could write to it may have put escape sequences (a window title, a cleared screen, a
// hidden line). Everything once prints goes through an escWriter, which shows every character
// that would not print as itself as an escape instead (see store.Printable):
//
//	C0 controls but tab and newline   \x1b
//	invalid UTF-8                     \xff
//	DEL, C1 controls, formatting      \u007f \u009b \u202e  (\ud83d\ude00 style beyond U+FFFF)
//	characters, line separators
//
// JSON stays valid JSON with the same values: encoding/json already escapes C0 controls and
// replaces invalid UTF-8, and \uXXXX is a JSON escape. Values printed in a one-line field also go
// through cell, which escapes tabs and newlines too.

// escWriter escapes what would not print as itself, writing through to w. A multi-byte
// character split across two Writes is held back until it is complete; Flush writes what is
// held. Safe for concurrent use (log lines and output share stderr).
type escWriter struct {
	mu   sync.Mutex
	w    io.Writer
	tail []byte // the start of a character the next Write completes
	buf  []byte
}

func newEscWriter(w io.Writer) *escWriter { return &escWriter{w: w} }

func (e *escWriter) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(p)
	if len(e.tail) > 0 {
		p = append(e.tail, p...)
		e.tail = nil
	}
	cut := len(p) - incomplete(p)
	if cut < len(p) {
		e.tail = append([]byte(nil), p[cut:]...)
	}
	p = p[:cut]
	if clean(p) {
		_, err := e.w.Write(p)
		return n, err
	}
	e.buf = escape(e.buf[:0], p, false)
	_, err := e.w.Write(e.buf)
	return n, err
}

// Flush writes a character left incomplete by the last Write (escaped: it is invalid now).
func (e *escWriter) Flush() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.tail) == 0 {
		return nil
	}
	b := escape(nil, e.tail, false)
	e.tail = nil
	_, err := e.w.Write(b)
	return err
}

// incomplete returns the length of a UTF-8 sequence at the end of p that has started but not
// ended (0 when p ends on a character boundary or with invalid bytes).
func incomplete(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(p[i]) {
			if utf8.FullRune(p[i:]) {
				return 0
			}
			return len(p) - i
		}
	}
	return 0
}

// clean reports whether p is printable ASCII, tabs and newlines only: the common case, written
// as it is.
func clean(p []byte) bool {
	for _, c := range p {
		if c >= 0x7f || c < 0x20 && c != '\t' && c != '\n' {
			return false
		}
	}
	return true
}

// escape appends p to dst with every character that would not print as itself escaped; tabs
// and newlines are kept unless oneLine.
func escape(dst, p []byte, oneLine bool) []byte {
	for len(p) > 0 {
		r, size := utf8.DecodeRune(p)
		switch {
		case r == utf8.RuneError && size == 1:
			dst = fmt.Appendf(dst, `\x%02x`, p[0])
		case (r == '\t' || r == '\n') && !oneLine:
			dst = append(dst, p[0])
		case r == '\t':
			dst = append(dst, `\t`...)
		case r == '\n':
			dst = append(dst, `\n`...)
		case r < 0x20:
			dst = fmt.Appendf(dst, `\x%02x`, r)
		case store.Printable(r):
			dst = append(dst, p[:size]...)
		case r > 0xffff:
			r -= 0x10000
			dst = fmt.Appendf(dst, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			dst = fmt.Appendf(dst, `\u%04x`, r)
		}
		p = p[size:]
	}
	return dst
}

// cell is s for a one-line field of text output: tabs and newlines are escaped as well (a note
// with a line break must not start a line of its own). The escWriter does the rest, but cell
// escapes everything itself, so its result is safe wherever it goes.
func cell(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return string(escape(nil, []byte(s), true))
		}
	}
	return s
}

// oneLineText is s with its line breaks made spaces (notes in history), then cell.
func oneLineText(s string) string {
	return cell(strings.NewReplacer("\r\n", " ", "\n", " ").Replace(s))
}
