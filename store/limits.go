package store

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on the free text a store keeps, in bytes of UTF-8 (a 4-byte character counts 4). Every
// backend holds values of exactly these sizes with its schema as it is (the conformance suite
// round-trips them); the once command and package once refuse longer values up front, so a value
// is accepted or refused the same way whatever the store. The tightest schema is MySQL's:
// VARCHAR(255) (characters, so at least 255 bytes) for holders and names, TEXT (65,535 bytes)
// for notes and checkpoints. The key-value stores keep one document per (task, slot) with every
// attempt in it, and ZooKeeper refuses a node over about 1 MB: notes are kept small so that a
// slot's document holds dozens of attempts with notes at the limit. Task names and slot values
// have their own rules (once.ValidateTask, slot.CheckValue); keys and claims have theirs (claims.go).
const (
	// MaxHolderLen bounds a holder: --holder, ONCE_HOLDER, Options.Holder (a Kubernetes pod name
	// is at most 253).
	MaxHolderLen = 255
	// MaxByLen bounds the person who resolves a slot (once resolve --by).
	MaxByLen = 255
	// MaxNoteLen bounds a note: once resolve --note, once report --note, the note an outcome or
	// an event carries. An attempt's stored note is its reported note and its outcome's joined
	// by "; ", so it may reach 2*MaxNoteLen+2 bytes.
	MaxNoteLen = 4096
	// MaxCheckpointLen bounds a checkpoint (once report --checkpoint); it is handed to the next
	// attempt as the environment variable ONCE_CHECKPOINT.
	MaxCheckpointLen = 4096
	// MaxProgressLen bounds a progress report ("DONE/TOTAL").
	MaxProgressLen = 64
)

// ErrInvalid is wrapped by every error about a value the contract refuses (CheckText, CheckName,
// the checks of what a write takes in values.go, CheckScope, ValidateKey, ClaimRequest.Check,
// Claimant.Check, a bad history cursor or kind, a prune request, a page of tasks (CheckTasksPage)):
// too long, not UTF-8, a NUL byte, control characters, a number out of range, a limit below 1.
// Nothing was written.
var ErrInvalid = errors.New("store: invalid value")

type invalidValue struct{ msg string }

func (e *invalidValue) Error() string { return e.msg }
func (e *invalidValue) Unwrap() error { return ErrInvalid }

// CheckText reports whether s can be kept as free text (a note, a checkpoint) on every store: at
// most max bytes of valid UTF-8 without a NUL byte (PostgreSQL's text cannot hold one, MySQL's
// utf8mb4 refuses invalid UTF-8). Line breaks and tabs are allowed; output escapes control
// characters. name, such as "--note", starts the message. Errors wrap ErrInvalid.
func CheckText(name, s string, max int) error {
	switch {
	case len(s) > max:
		return &invalidValue{fmt.Sprintf("%s is %d bytes long: the limit is %d bytes (of UTF-8) on every store", name, len(s), max)}
	case !utf8.ValidString(s):
		return &invalidValue{fmt.Sprintf("%s is not valid UTF-8: give text", name)}
	case strings.IndexByte(s, 0) >= 0:
		return &invalidValue{fmt.Sprintf("%s contains a NUL byte: give text", name)}
	}
	return nil
}

// CheckName reports whether s can name someone (a holder, the person who resolves): not empty,
// CheckText, and no control or formatting characters, so that it stays one line and shows as
// itself in a terminal. Errors wrap ErrInvalid.
func CheckName(name, s string, max int) error {
	if s == "" {
		return &invalidValue{fmt.Sprintf("%s is empty: give a name such as host:pid or user@host", name)}
	}
	if err := CheckText(name, s, max); err != nil {
		return err
	}
	for i, r := range s {
		if !Printable(r) {
			return &invalidValue{fmt.Sprintf("%s %q has %U at byte %d: use printable characters (no control characters, tabs or line breaks)", name, s, r, i)}
		}
	}
	return nil
}

// Printable reports whether r shows as itself on a terminal: not a C0 or C1 control character,
// DEL, a formatting character (bidirectional overrides, zero-width marks) or a line or paragraph
// separator.
func Printable(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return false
	case r < 0x7f:
		return true
	}
	return !unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// Clip makes s storable as a note of at most max bytes: invalid UTF-8 and NUL bytes become
// U+FFFD, and a longer text is cut at a character boundary and ends with "…". For text once
// composes itself (an error's message), which is clipped rather than refused.
func Clip(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= max {
		return s
	}
	const ell = "…"
	if max < len(ell) {
		return ""
	}
	cut := max - len(ell)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ell
}
