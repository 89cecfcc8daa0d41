package jobfile

import (
	"fmt"
	"path"
	"strings"
)

// ImportCrontab turns a crontab into the text of a TOML jobs file with the same jobs: each job's
// name is written out (a derived name is kept, so that the job's history in the store goes on),
// its CRON_TZ, environment and "# once:" options are its keys, and the crontab line is a comment
// above it. A command wrapped in `flock -n FILE CMD…`, `flock -n FILE -c "CMD"` or `run-one CMD…`
// loses the wrapper (once gives the exclusion, across the fleet), with a comment saying so; a
// wrapper it cannot drop safely (shell operators after it, a flock that waits) is kept, with a
// comment too. name is the crontab's file name, for errors; the crontab must parse (Parse).
func ImportCrontab(name string, data []byte) ([]byte, error) {
	out, _, err := importCrontab(name, data)
	return out, err
}

// importCrontab also returns the jobs the text describes.
func importCrontab(name string, data []byte) ([]byte, []Job, error) {
	cjs, err := readCrontab(name, data)
	if err != nil {
		return nil, nil, err
	}
	jobs := make([]Job, 0, len(cjs))
	for _, c := range cjs {
		j, err := build(name, c.line, c.f)
		if err != nil {
			return nil, nil, err
		}
		j.Env = c.env
		jobs = append(jobs, j)
	}
	if err := checkDuplicates(jobs); err != nil {
		return nil, nil, err
	}
	lines := strings.Split(string(data), "\n")
	var b strings.Builder
	fmt.Fprintf(&b, "# Jobs file imported from the crontab %s (once daemon --import-crontab; docs/jobs-file.md).\n", comment(path.Base(name)))
	b.WriteString("# Names derived from a command are kept so that the job's history goes on; rename a job\n")
	b.WriteString("# freely while it has no history.\n")
	for i, c := range cjs {
		fmt.Fprintf(&b, "\n# %s line %d: %s\n", comment(path.Base(name)), c.line, comment(strings.TrimSpace(lines[c.line-1])))
		cmd := c.command
		if inner, wrapper, note := unwrapLock(cmd); inner != "" {
			cmd = inner
			jobs[i].Command = []string{c.shell, "-c", inner}
			fmt.Fprintf(&b, "# %s dropped: once runs each slot once across the fleet.\n", comment(wrapper))
		} else if note != "" {
			fmt.Fprintf(&b, "# %s\n", comment(note))
		}
		writeJob(&b, c, jobs[i], cmd)
	}
	return []byte(b.String()), jobs, nil
}

// writeJob writes one [[job]] table.
func writeJob(b *strings.Builder, c cronJob, j Job, cmd string) {
	b.WriteString("[[job]]\n")
	fmt.Fprintf(b, "name = %s\n", quote(j.Name))
	fmt.Fprintf(b, "schedule = %s\n", quote(j.Schedule))
	if j.TZ != "" {
		fmt.Fprintf(b, "tz = %s\n", quote(j.TZ))
	}
	if c.shell == "sh" {
		fmt.Fprintf(b, "command = %s\n", quote(cmd))
	} else {
		fmt.Fprintf(b, "command = [%s, \"-c\", %s]\n", quote(c.shell), quote(cmd))
	}
	if len(j.Env) > 0 {
		b.WriteString("env = { ")
		for i, kv := range j.Env {
			k, v, _ := strings.Cut(kv, "=")
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(b, "%s = %s", k, quote(v))
		}
		b.WriteString(" }\n")
	}
	for _, k := range jobKeys {
		for _, o := range c.opts {
			switch {
			case o.key != k || k == "name" || k == "tz":
			case k == "max-attempts":
				fmt.Fprintf(b, "%s = %d\n", k, j.MaxAttempts)
			case k == "catch-up-max":
				fmt.Fprintf(b, "%s = %d\n", k, j.CatchUpMax)
			case k == "limit":
				fmt.Fprintf(b, "%s = %d\n", k, j.Limit)
			default:
				fmt.Fprintf(b, "%s = %s\n", k, quote(o.val))
			}
		}
	}
}

// quote writes s as a TOML basic string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 && r != '\t' || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// comment makes s safe inside a TOML comment: control characters (but tab) become '?'.
func comment(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// unwrapLock drops a leading `flock -n FILE …` or `run-one …` from a command. It returns the
// command without it and the wrapper's text; or "" and, when there is a wrapper it keeps, why.
func unwrapLock(cmd string) (inner, wrapper, note string) {
	toks, ok := lexShell(cmd)
	if !ok || len(toks) < 2 || toks[0].op {
		return "", "", ""
	}
	prog := path.Base(toks[0].text)
	if prog != "flock" && prog != "run-one" {
		return "", "", ""
	}
	keep := prog + " kept: "
	for _, t := range toks {
		if t.op {
			return "", "", keep + "the line has shell operators (; & | ( ) `) the wrapper may not cover; drop it by hand if it only guarded this job"
		}
	}
	if prog == "run-one" {
		return strings.TrimSpace(cmd[toks[1].start:]), strings.TrimSpace(cmd[:toks[1].start]), ""
	}
	i, nonblock := 1, false
	for ; i < len(toks) && strings.HasPrefix(toks[i].text, "-") && toks[i].text != "-c"; i++ {
		switch f := toks[i].text; {
		case f == "--nonblock" || f == "--nb":
			nonblock = true
		case f == "--exclusive" || f == "--close":
		case !strings.HasPrefix(f, "--") && strings.Trim(f[1:], "nxeo") == "" && len(f) > 1:
			nonblock = nonblock || strings.Contains(f, "n")
		default:
			return "", "", keep + "it has the option " + f + "; drop it by hand if it only guarded this job"
		}
	}
	if !nonblock {
		return "", "", keep + "without -n it waits for the lock; once's overlap policy (docs/daemon.md) can take its place: drop it by hand"
	}
	if i+1 >= len(toks) { // no FILE and command
		return "", "", ""
	}
	file := i
	if t := toks[file+1].text; (t == "-c" || t == "--command") && file+3 == len(toks) {
		if raw := cmd[toks[file+2].start:]; raw[0] != '\'' && strings.Contains(raw, "$") {
			return "", "", keep + "its -c command is expanded by the shell before flock runs it; drop it by hand, in single quotes"
		}
		return toks[file+2].text, strings.TrimSpace(cmd[:toks[file+2].start]) + " …", ""
	} else if t == "-c" || t == "--command" {
		return "", "", keep + "words follow its -c command; drop it by hand if it only guarded this job"
	}
	return strings.TrimSpace(cmd[toks[file+1].start:]), strings.TrimSpace(cmd[:toks[file+1].start]), ""
}

// shellTok is a word of a shell command line (quotes removed) or a control operator.
type shellTok struct {
	text  string
	start int
	op    bool
}

// lexShell splits a simple shell command line into words and operators; false on an unclosed
// quote. It knows quotes, backslashes, comments and redirections (2>&1 is a word); anything
// fancier (; & | ( ) `) shows as an operator, and the caller then keeps the line as it is.
func lexShell(s string) ([]shellTok, bool) {
	var toks []shellTok
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
			continue
		case c == '#':
			return toks, true
		case isOp(c) || c == '&' && !(i+1 < len(s) && s[i+1] == '>'):
			toks = append(toks, shellTok{text: string(c), start: i, op: true})
			i++
			continue
		}
		start := i
		var b strings.Builder
	word:
		for i < len(s) {
			c := s[i]
			switch {
			case c == ' ' || c == '\t' || isOp(c):
				break word
			case c == '&' && i > start && s[i-1] != '>' && s[i-1] != '<':
				break word
			case c == '\\':
				if i+1 < len(s) {
					b.WriteByte(s[i+1])
				}
				i += 2
			case c == '\'':
				j := strings.IndexByte(s[i+1:], '\'')
				if j < 0 {
					return nil, false
				}
				b.WriteString(s[i+1 : i+1+j])
				i += j + 2
			case c == '"':
				n, ok := doubleQuoted(s[i:], &b)
				if !ok {
					return nil, false
				}
				i += n
			default:
				b.WriteByte(c)
				i++
			}
		}
		toks = append(toks, shellTok{text: b.String(), start: start})
	}
	return toks, true
}

func isOp(c byte) bool { return strings.IndexByte(";|()`", c) >= 0 }

// doubleQuoted reads a "…" string at s[0] into b; it returns the bytes it took.
func doubleQuoted(s string, b *strings.Builder) (int, bool) {
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '"':
			return i + 1, true
		case s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\", s[i+1]) >= 0:
			b.WriteByte(s[i+1])
			i++
		default:
			b.WriteByte(s[i])
		}
	}
	return 0, false
}
