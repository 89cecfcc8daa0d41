package store_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/once-run/once/store"
)

func init() {
	nop := func(context.Context, string) (store.Store, error) { return nil, errors.New("test scheme") }
	store.Register("pwtest", nop, store.TakesPassword)
	store.Register("nopwtest", nop)
}

func TestWithPassword(t *testing.T) {
	for _, c := range []struct{ dsn, pw, want string }{
		{"pwtest://u@h:1/db?x=1", "s3cr3t", "pwtest://u:s3cr3t@h:1/db?x=1"},
		{"pwtest://h/0", "p@ss:w/rd?#&+ %", "pwtest://:p%40ss%3Aw%2Frd%3F%23%26%2B%20%25@h/0"},
		{"pwtest://u@h1:1,h2:2", "pw1", "pwtest://u:pw1@h1:1,h2:2"},
		{"PWTEST://u@h/db", "pw2", "PWTEST://u:pw2@h/db"},
		{"pwtest://u@h/db?application_name=a@b", "pw3", "pwtest://u:pw3@h/db?application_name=a@b"},
	} {
		got, err := store.WithPassword(c.dsn, c.pw)
		if err != nil || got != c.want {
			t.Errorf("WithPassword(%q) = %q, %v; want %q", c.dsn, got, err, c.want)
			continue
		}
		// Every URL reader gets the password back.
		if u, err := url.Parse(got); err != nil || u.User == nil {
			t.Errorf("%q does not parse: %v", got, err)
		} else if pw, _ := u.User.Password(); pw != c.pw {
			t.Errorf("%q reads back as %q", got, pw)
		}
		if strings.Contains(store.Redact(got), c.pw) {
			t.Errorf("Redact(%q) shows it", got)
		}
	}
	for _, c := range []struct{ dsn, want string }{
		{"pwtest://u:inline@h/db", "already has a password"},
		{"pwtest://u:@h/db", "already has a password"},
		{"pwtest://h/db?password=inline", "already has a password"},
		{"nopwtest://h/db", "take no password"},
		{"nosuch://h/db", "unknown scheme"},
		{"host=h user=u", "key=value"},
	} {
		_, err := store.WithPassword(c.dsn, "x")
		if !errors.Is(err, store.ErrBadDSN) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "inline") {
			t.Errorf("WithPassword(%q) = %v; want ErrBadDSN saying %q", c.dsn, err, c.want)
		}
	}
	if !store.AcceptsPassword("pwtest") || store.AcceptsPassword("nopwtest") || store.AcceptsPassword("nosuch") {
		t.Fatal("AcceptsPassword")
	}
}

func TestHasPassword(t *testing.T) {
	for dsn, want := range map[string]bool{
		"pwtest://u:p@h/db":                true,
		"pwtest://:p@h/db":                 true,
		"pwtest://u@h/db":                  false,
		"pwtest://h/db?password=p":         true,
		"pwtest://h/db?sslpassword=p":      false,
		"pwtest://u@h/db?name=a:b@c":       false,
		"pwtest://h/db?application_name=x": false,
	} {
		if got := store.HasPassword(dsn); got != want {
			t.Errorf("HasPassword(%q) = %v", dsn, got)
		}
	}
}
