// Command once-shim is once's supervision shim as a binary of its own: installed beside once (or
// in ../libexec/once/ from once's directory), once starts it instead of re-executing itself, and a
// run starts faster. It imports only package supervise, so that nothing else is paged in or
// initialised before it. It is internal to once: see docs/supervision.md.
package main

import (
	"os"

	"github.com/once-run/once/supervise"
)

func main() { os.Exit(supervise.ShimMain(os.Args[1:])) }
