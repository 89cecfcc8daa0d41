package kvstore

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/once-run/once/store"
)

// FuzzKeyRec: any bytes decode without panicking, or are refused as corrupt: what decodes is pending
// or done, and its expiry (Claimed+TTL) does not overflow; a decoded record round-trips; an encoded record
// starts with `{"s":` (the Redis claim script splices the claim time in front of the rest) and stays
// the same record with that time spliced in.
func FuzzKeyRec(f *testing.F) {
	f.Add([]byte(`{"s":"pending","r":"run","k":3,"t":"task","l":1000000}`), "k", "fp", int64(5), []byte("res"))
	f.Add([]byte(`{"s":"done","c":1700000000000000,"d":1700000000000001,"x":"AAE="}`), "", "", int64(0), []byte(nil))
	f.Add([]byte(`not json`), "ü", "\x00", int64(-1), []byte{0})
	f.Add([]byte(`{"s":"pending","c":1700000000000000,"l":9223372036854775807}`), "", "", int64(0), []byte(nil))
	f.Add([]byte(`{"s":"lost","d":-1}`), "", "", int64(0), []byte(nil))
	f.Fuzz(func(t *testing.T, b []byte, run, fp string, token int64, result []byte) {
		if r, err := DecodeKeyRec("k", b); err == nil {
			if r.State != store.KeyPending && r.State != store.KeyDone || r.Claimed+r.TTL < r.Claimed {
				t.Fatalf("%q decodes as %+v: a state or an expiry no once writes", b, r)
			}
			again, err := DecodeKeyRec("k", r.Encode())
			if err != nil || !reflect.DeepEqual(norm(again), norm(r)) {
				t.Fatalf("round trip of %q: %+v, %v; want %+v", b, again, err, r)
			}
		}
		if !utf8.ValidString(run) || !utf8.ValidString(fp) {
			return // Claim refuses these: JSON would replace the bad bytes
		}
		for _, st := range []store.KeyState{store.KeyPending, store.KeyDone} {
			r := KeyRec{State: st, RunID: run, FP: fp, Token: token, Result: result}
			enc := r.Encode()
			if !bytes.HasPrefix(enc, []byte(`{"s":`)) {
				t.Fatalf("encoding %s does not start with {\"s\":", enc)
			}
			spliced := append([]byte(`{"c":1700000000123456,`), enc[1:]...)
			got, err := DecodeKeyRec("k", spliced)
			r.Claimed = 1700000000123456
			if err != nil || !reflect.DeepEqual(norm(got), norm(r)) {
				t.Fatalf("spliced %s: %+v, %v; want %+v", spliced, got, err, r)
			}
		}
	})
}

// norm makes an empty result and a nil one equal (JSON omits both).
func norm(r KeyRec) KeyRec {
	if len(r.Result) == 0 {
		r.Result = nil
	}
	return r
}

// TestCorruptKeyRecordSaysWhich: a record refused as corrupt is named by its key, with what to do, as a
// refused ledger document is by its task and slot.
func TestCorruptKeyRecordSaysWhich(t *testing.T) {
	_, err := DecodeKeyRec("order-42", []byte(`{"s":"lost"}`))
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), `"order-42"`) || !strings.Contains(err.Error(), "restore it") {
		t.Errorf("%v; want ErrUnavailable naming the key and what to do", err)
	}
	_, err = Unmarshal([]byte(`{"task":"backup","slot":"2026-12-06","attempts":[{"attempt":-1}]}`))
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), `task "backup" slot "2026-12-06"`) || !strings.Contains(err.Error(), "restore it") {
		t.Errorf("%v; want ErrUnavailable naming the slot and what to do", err)
	}
}
