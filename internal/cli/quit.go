package cli

import (
	"io"
	"runtime"
)

// dumpGoroutines writes every goroutine's stack to w, as Go's runtime does on SIGQUIT. The
// long-running commands (once daemon, once serve) catch SIGQUIT to stop as on SIGTERM (left to
// Go, the daemon exited 2 with its jobs' attempts left running); an operator who sends it to one
// that seems stuck still gets the stacks they asked for, first.
func dumpGoroutines(w io.Writer) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= 64<<20 {
			_, _ = io.WriteString(w, "SIGQUIT: the goroutines' stacks, then a stop as on SIGTERM\n\n")
			_, _ = w.Write(buf[:n])
			return
		}
		buf = make([]byte, 2*len(buf))
	}
}
