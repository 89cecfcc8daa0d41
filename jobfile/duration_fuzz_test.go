package jobfile

import (
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseDuration: a duration of weeks, days and a Go duration reads as their exact sum, or as
// maxDuration when the sum is more than a duration holds (then out of every key's range), never
// as a value wrapped around; a bare Go duration reads as time.ParseDuration reads it.
func FuzzParseDuration(f *testing.F) {
	f.Add(uint16(1), uint16(2), "12h", uint8(3))
	f.Add(uint16(30501), uint16(0), "", uint8(1))
	f.Add(uint16(15250), uint16(7), "", uint8(3))
	f.Add(uint16(15250), uint16(0), "2562047h", uint8(1))
	f.Add(uint16(0), uint16(0), "-5s", uint8(0))
	f.Add(uint16(0), uint16(65535), "1ns", uint8(2))
	f.Fuzz(func(t *testing.T, w, d uint16, rest string, parts uint8) {
		var s string
		if parts&1 != 0 {
			s += strconv.Itoa(int(w)) + "w"
		}
		if parts&2 != 0 {
			s += strconv.Itoa(int(d)) + "d"
		}
		s += rest
		got, ok := parseDuration(s)
		if strings.ContainsAny(rest, "wd") || rest != "" && (rest[0] == '+' || rest[0] == '-' && parts&3 != 0) {
			return // another reading of the text; the rule for these is in TestParseTOMLBad
		}
		x, err := time.ParseDuration(rest)
		if rest == "" {
			x, err = 0, nil
		}
		if parts&3 == 0 {
			if want, werr := time.ParseDuration(s); (werr == nil) != ok || ok && got != want {
				t.Fatalf("parseDuration(%q) = %v, %v; time.ParseDuration: %v, %v", s, got, ok, want, werr)
			}
			return
		}
		if err != nil {
			if ok {
				t.Fatalf("parseDuration(%q) = %v: %q is not a duration", s, got, rest)
			}
			return
		}
		sum := big.NewInt(0)
		if parts&1 != 0 {
			sum.Add(sum, new(big.Int).Mul(big.NewInt(int64(w)), big.NewInt(int64(7*day))))
		}
		if parts&2 != 0 {
			sum.Add(sum, new(big.Int).Mul(big.NewInt(int64(d)), big.NewInt(int64(day))))
		}
		sum.Add(sum, big.NewInt(int64(x)))
		want := maxDuration
		if sum.IsInt64() {
			want = time.Duration(sum.Int64())
		}
		if !ok || got != want {
			t.Fatalf("parseDuration(%q) = %v, %v; want %v", s, got, ok, want)
		}
	})
}
