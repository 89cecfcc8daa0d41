package slot

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// checkNFC refuses a value that is not in Unicode Normalization Form C (NFC). Two values that
// look the same but are encoded differently ("café" with é as U+00E9, or as e and U+0301, as
// macOS writes file names) would be two slots, and the work would run once in each: a slot value
// has one encoding, NFC's. The message shows the value with the runes that combine with the one
// before them (or that NFC replaces) escaped, since a terminal draws both forms alike, and the
// NFC form to write instead, unless that form breaks the length limit itself.
func checkNFC(v string) error {
	if norm.NFC.IsNormalString(v) {
		return nil
	}
	n := norm.NFC.String(v)
	if len(n) > MaxValueLen {
		return invalidf("--slot %s is not in Unicode NFC form, and its NFC form is %d bytes long; the limit is %d", quoteCombining(v), len(n), MaxValueLen)
	}
	return invalidf("--slot %s is not in Unicode NFC form: write it as %q", quoteCombining(v), n)
}

// quoteCombining quotes v as %q does, with each rune that may combine with the one before it
// (a combining mark, a Hangul vowel or final consonant jamo) or that NFC replaces by another
// (U+212B ANGSTROM SIGN) written \uXXXX (\UXXXXXXXX beyond U+FFFF). v is valid UTF-8.
func quoteCombining(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(v); {
		p := norm.NFC.PropertiesString(v[i:])
		if p.Size() == 0 { // not reached: v is valid UTF-8
			break
		}
		r := v[i : i+p.Size()]
		switch q := strconv.Quote(r); {
		case !p.BoundaryBefore() || !norm.NFC.IsNormalString(r):
			for _, c := range r {
				if c > 0xffff {
					fmt.Fprintf(&b, `\U%08x`, c)
				} else {
					fmt.Fprintf(&b, `\u%04x`, c)
				}
			}
		default:
			b.WriteString(q[1 : len(q)-1])
		}
		i += p.Size()
	}
	b.WriteByte('"')
	return b.String()
}
