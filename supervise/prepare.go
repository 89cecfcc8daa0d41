//go:build unix

package supervise

// Start starts cfg.Args in a new process group and returns at once: Prepare followed by
// Prepared.Start. Outside Linux there is no parent-death signal and no shim: cfg.Shim is ignored, and
// the command survives once's SIGKILL; errors are the same everywhere.
func Start(cfg Config) (*Process, error) {
	pr, err := Prepare(cfg)
	if err != nil {
		return nil, err
	}
	return pr.Start()
}

// find returns the path of cfg.Args[0] after checking what can fail before it runs: the command
// exists, is executable, and its interpreter or loader exists (errors wrap ErrNotFound or
// ErrNotExecutable).
func find(cfg Config) (string, error) {
	if len(cfg.Args) == 0 {
		return "", &cmdError{ErrNotFound, "command not found: (none given)"}
	}
	path, err := lookPath(cfg.Args[0], cfg.Env, cfg.Dir)
	if err != nil {
		return "", err
	}
	if err := checkExec(cfg.Args[0], path, cfg.Dir); err != nil {
		return "", err
	}
	return path, nil
}
