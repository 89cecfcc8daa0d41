// Command once runs scheduled jobs once: never two at a time, never twice for the same slot, never
// silently lost. See `once --help` and https://github.com/once-run/once.
package main

import (
	"context"
	"os"

	_ "time/tzdata" // --tz works on machines without a zoneinfo database

	"github.com/once-run/once/internal/cli"
	"github.com/once-run/once/supervise"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == supervise.ShimArg {
		os.Exit(supervise.ShimMain(os.Args[2:]))
	}
	os.Exit(cli.Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
