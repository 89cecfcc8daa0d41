package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"log/syslog"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Log levels by name (--log-level, ONCE_LOG_LEVEL).
var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError,
}

// logSyslog is the --log-file value that means the local syslog; a file of that name is ./syslog.
const logSyslog = "syslog"

// logConfig is what the logging flags and variables resolve to.
type logConfig struct {
	// stderr is the level of the lines on stderr.
	stderr slog.Level
	// file is the level of the lines in the log file or syslog.
	file slog.Level
	// path is the --log-file value: a file, logSyslog, or "" for none.
	path string
}

// parseLevel reads a --log-level value; src names where it came from.
func parseLevel(src, s string) (slog.Level, error) {
	if l, ok := logLevels[s]; ok {
		return l, nil
	}
	return 0, usage("%s %q: use debug, info, warn or error", src, s)
}

// logConfig resolves --log-level, -v, --log-file and their variables. Without a level, stderr
// gets info on a terminal and warn otherwise — a run that succeeds, skips or is busy is silent
// under cron, which mails whatever a job prints — while the log file or syslog gets info: the
// start and end of every attempt. A level given applies to both.
func (a *app) logConfig() (logConfig, error) {
	c := logConfig{stderr: slog.LevelWarn, file: slog.LevelInfo}
	if isTerminal(a.rawStderr) {
		c.stderr = slog.LevelInfo
	}
	set := func(l slog.Level) { c.stderr, c.file = l, l }
	switch {
	case a.verbose > 0 && a.logLevel != "":
		return c, usage("-v and --log-level are both given: use one (-v is info, -vv debug)")
	case a.verbose == 1:
		set(slog.LevelInfo)
	case a.verbose > 1:
		set(slog.LevelDebug)
	case a.logLevel != "":
		l, err := parseLevel("--log-level", a.logLevel)
		if err != nil {
			return c, err
		}
		set(l)
	default:
		if s, ok := os.LookupEnv("ONCE_LOG_LEVEL"); ok {
			if s == "" {
				return c, usage("ONCE_LOG_LEVEL is set but empty: unset it, or give debug, info, warn or error")
			}
			l, err := parseLevel("ONCE_LOG_LEVEL", s)
			if err != nil {
				return c, err
			}
			set(l)
		}
	}
	c.path = a.logFile
	if c.path == "" {
		if s, ok := os.LookupEnv("ONCE_LOG_FILE"); ok {
			if s == "" {
				return c, usage("ONCE_LOG_FILE is set but empty: unset it, or give a file or syslog")
			}
			c.path = s
		}
	}
	return c, nil
}

// logger is the one logger of this invocation: once's lines in --log-format on stderr and, with
// --log-file, in that file or syslog too. It is also made log/slog's default (and so the standard
// log package's), so that every line once writes — a store's warning, a library's — comes out in
// the same format and at the same levels.
func (a *app) logger() (*slog.Logger, error) {
	if a.log != nil {
		return a.log, nil
	}
	newHandler := func(w io.Writer, o *slog.HandlerOptions) slog.Handler { return slog.NewTextHandler(w, o) }
	switch a.logFormat {
	case "text":
	case "json":
		newHandler = func(w io.Writer, o *slog.HandlerOptions) slog.Handler { return slog.NewJSONHandler(w, o) }
	default:
		return nil, usage("--log-format %q: use text or json", a.logFormat)
	}
	c, err := a.logConfig()
	if err != nil {
		return nil, err
	}
	h := newHandler(a.stderr, &slog.HandlerOptions{Level: c.stderr})
	if c.path != "" {
		sink, err := a.openLogSink(c, newHandler)
		if err != nil {
			return nil, err
		}
		a.sinkLog = slog.New(sink)
		h = slog.NewMultiHandler(h, sink)
	}
	a.log = slog.New(h)
	slog.SetDefault(a.log)
	return a.log, nil
}

// openLogSink opens the log file (appending) or the local syslog.
func (a *app) openLogSink(c logConfig, newHandler func(io.Writer, *slog.HandlerOptions) slog.Handler) (slog.Handler, error) {
	if c.path == logSyslog {
		w, err := syslogDial()
		if err != nil {
			return nil, usage("--log-file syslog: no syslog daemon answers on this host (%v): start one (rsyslog, systemd-journald), or give a file", err)
		}
		a.closers = append(a.closers, w)
		return newSyslogHandler(w, c.file, newHandler), nil
	}
	f, err := openLogFile(c.path)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, f)
	return newHandler(f, &slog.HandlerOptions{Level: c.file}), nil
}

// syslogDial connects to the local syslog; tests replace it.
var syslogDial = func() (*syslog.Writer, error) {
	return syslog.New(syslog.LOG_USER|syslog.LOG_INFO, "once")
}

// openLogFile opens path for appending, creating it with mode 0600. It must be a regular file and
// not a symbolic link: a link in a shared directory would let another user point once's writes
// (as root, from cron) at any file, and a FIFO would block once before it runs anything.
func openLogFile(path string) (*os.File, error) {
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_APPEND|syscall.O_CREAT|syscall.O_CLOEXEC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, usage("--log-file %s is a symbolic link: give the file it points to", path)
	case errors.Is(err, syscall.ENXIO): // a FIFO without a reader
		return nil, usage("--log-file %s is not a regular file: give a file, or syslog", path)
	case err != nil:
		return nil, usage("--log-file %s: %v: give a file you can write, or leave --log-file out", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, usage("--log-file %s is not a regular file: give a file, or syslog", path)
	}
	return f, nil
}

// closeLog closes the log file or syslog connection, after the last line.
func (a *app) closeLog() {
	for _, c := range a.closers {
		c.Close()
	}
	a.closers = nil
}

// syslogHandler sends each record to syslog at its level's priority, formatted as --log-format
// says but without the time (syslog stamps it).
type syslogHandler struct {
	slog.Handler // formats into buf
	mu           *sync.Mutex
	buf          *bytes.Buffer
	w            *syslog.Writer
}

func newSyslogHandler(w *syslog.Writer, level slog.Level, newHandler func(io.Writer, *slog.HandlerOptions) slog.Handler) syslogHandler {
	buf := &bytes.Buffer{}
	noTime := func(groups []string, at slog.Attr) slog.Attr {
		if len(groups) == 0 && at.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return at
	}
	return syslogHandler{Handler: newHandler(buf, &slog.HandlerOptions{Level: level, ReplaceAttr: noTime}),
		mu: &sync.Mutex{}, buf: buf, w: w}
}

func (h syslogHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
	if err := h.Handler.Handle(ctx, r); err != nil {
		return err
	}
	msg, w := strings.TrimSuffix(h.buf.String(), "\n"), h.w
	switch {
	case r.Level >= slog.LevelError:
		return w.Err(msg)
	case r.Level >= slog.LevelWarn:
		return w.Warning(msg)
	case r.Level >= slog.LevelInfo:
		return w.Info(msg)
	}
	return w.Debug(msg)
}

func (h syslogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return syslogHandler{Handler: h.Handler.WithAttrs(as), mu: h.mu, buf: h.buf, w: h.w}
}

func (h syslogHandler) WithGroup(name string) slog.Handler {
	return syslogHandler{Handler: h.Handler.WithGroup(name), mu: h.mu, buf: h.buf, w: h.w}
}
