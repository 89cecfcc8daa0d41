package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// strictValue is a flag of one value, as once parses it (strictFlags): a whole number is decimal
// (pflag reads 010 as octal 8, 0x10 as 16 and 1_000 as 1000, strconv's base 0, so a zero-padded
// --busy-exit 075 was 61), and a refusal is said in one line that names the flag. Given twice, the
// last value wins, as in GNU tools: an alias or a wrapper's defaults come first and are overridden.
type strictValue struct {
	pflag.Value
	name string
	// refused keeps the last refusal, for the one line said without pflag's wrapping.
	refused *error
}

func (v *strictValue) Set(s string) error {
	err := v.check(s)
	if err != nil {
		*v.refused = err
	}
	return err
}

func (v *strictValue) check(s string) error {
	if intTypes[v.Value.Type()] {
		if err := checkDecimal(s); err != nil {
			return fmt.Errorf("--%s %v", v.name, err)
		}
	}
	if err := v.Value.Set(s); err != nil {
		return fmt.Errorf("--%s %v", v.name, err)
	}
	return nil
}

// intTypes are pflag's whole-number flag types.
var intTypes = map[string]bool{"int": true, "int8": true, "int16": true, "int32": true, "int64": true,
	"uint": true, "uint8": true, "uint16": true, "uint32": true, "uint64": true}

// checkDecimal accepts a whole number written in decimal, with an optional sign and without
// leading zeros, that fits 64 bits.
func checkDecimal(s string) error {
	digits := strings.TrimLeft(s, "+-")
	ok := len(s)-len(digits) <= 1 && digits != ""
	for i := 0; ok && i < len(digits); i++ {
		ok = digits[i] >= '0' && digits[i] <= '9'
	}
	switch {
	case !ok:
		return fmt.Errorf("%q is not a whole number: write it in decimal digits, such as 3", s)
	case len(digits) > 1 && digits[0] == '0':
		return fmt.Errorf("%q has a leading 0 (010 was read as octal 8): write the number without it", s)
	}
	if _, err := strconv.ParseInt(s, 10, 64); errors.Is(err, strconv.ErrRange) {
		if _, uerr := strconv.ParseUint(s, 10, 64); uerr != nil {
			return fmt.Errorf("%s is out of range: give a smaller number", s)
		}
	}
	return nil
}

// multiTypes are flags that take several values, or none: they are left as pflag made them.
var multiTypes = map[string]bool{"bool": true, "count": true, "stringToString": true, "stringToInt": true}

// strictFlags makes every one-value flag of c and its subcommands a strictValue; *refused is set to
// the error of a value it refuses.
func strictFlags(c *cobra.Command, refused *error) {
	wrap := func(f *pflag.Flag) {
		if _, done := f.Value.(*strictValue); done || multiTypes[f.Value.Type()] ||
			strings.HasSuffix(f.Value.Type(), "Slice") || strings.HasSuffix(f.Value.Type(), "Array") {
			return
		}
		f.Value = &strictValue{Value: f.Value, name: f.Name, refused: refused}
	}
	c.PersistentFlags().VisitAll(wrap)
	c.LocalFlags().VisitAll(wrap)
	for _, sub := range c.Commands() {
		strictFlags(sub, refused)
	}
}
