package cli

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// notOnceFlags are words of docs/cli.md that look like flags but are other programs' (docker run
// --user).
var notOnceFlags = map[string]bool{"--user": true}

// TestCLIDocNamesEveryFlag: docs/cli.md is the user contract, so every flag of every command (but
// cobra's help and completion) is in it, and every flag it names exists. It lacked --notify,
// --ping, --keep-going, --allow-no-slot and the keys subcommands' flags.
func TestCLIDocNamesEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?:^|[^\w-])(--[a-z][a-z0-9-]*)`).FindAllStringSubmatch(doc, -1) {
		documented[m[1]] = true
	}
	flags := map[string][]string{} // flag → the commands that have it
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() == "completion" || c.Name() == "help" {
			return
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" {
				flags["--"+f.Name] = append(flags["--"+f.Name], c.CommandPath())
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(Command())
	var missing, unknown []string
	for f, cmds := range flags {
		if !documented[f] {
			missing = append(missing, f+" ("+strings.Join(cmds, ", ")+")")
		}
	}
	for f := range documented {
		if flags[f] == nil && !notOnceFlags[f] {
			unknown = append(unknown, f)
		}
	}
	sort.Strings(missing)
	sort.Strings(unknown)
	if len(missing) > 0 {
		t.Errorf("flags docs/cli.md does not name: %s", strings.Join(missing, "; "))
	}
	if len(unknown) > 0 {
		t.Errorf("docs/cli.md names flags no command has: %s", strings.Join(unknown, ", "))
	}
}
