package once

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrInvalid matches every error about bad options or input (errors.Is). Their messages are one
// line saying what was wrong and how to fix it.
var ErrInvalid = errors.New("invalid input")

type invalidError struct {
	msg string
	err error // the error it stands for, if any (store.ErrInvalid)
}

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }
func (e *invalidError) Unwrap() error        { return e.err }

func invalidf(format string, a ...any) error { return &invalidError{msg: fmt.Sprintf(format, a...)} }

// invalid makes err match ErrInvalid too, keeping its message.
func invalid(err error) error {
	if err == nil {
		return nil
	}
	return &invalidError{msg: err.Error(), err: err}
}

// MaxTaskLen is the longest task name.
const MaxTaskLen = 200

// ValidateTask checks a task name: 1–200 characters of A-Z a-z 0-9 . _ : @ / -.
func ValidateTask(name string) error {
	if name == "" {
		return invalidf("task name is empty: set Options.Task (letters, digits and . _ : @ / -)")
	}
	if len(name) > MaxTaskLen {
		return invalidf("task name is %d characters long: use at most %d", len(name), MaxTaskLen)
	}
	for i, r := range name {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:@/-", r) {
			continue
		}
		what := fmt.Sprintf("%q", r) // the character itself, escaped if it does not print
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(name[i:]); size == 1 {
				what = fmt.Sprintf("the byte 0x%02x (not UTF-8)", name[i])
			}
		}
		return invalidf("task name %q has %s at byte %d: use only ASCII letters, digits and . _ : @ / -", name, what, i)
	}
	return nil
}
