package jobfile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/once-run/once/slot"
)

// cronJob is one job line of a crontab as read, before validation: ImportCrontab writes these.
type cronJob struct {
	line    int      // the job line
	f       fields   // its keys: schedule, command, name, options, tz
	env     []string // "K=V" in effect for it, sorted
	command string   // the command text as sh -c gets it
	shell   string
	named   bool // the name came from "# once: name=…"
	opts    []option
	cronTZ  string // CRON_TZ in effect ("" = none)
}

type option struct {
	key, val string
	line     int
}

// optionKey: keys a "# once:" line may set. The schedule and command are the line's; env is set
// by NAME=value lines.
func optionKey(k string) bool { return k != "schedule" && k != "command" && k != "env" && isJobKey(k) }

// parseCrontab reads crontab lines into Jobs (docs/jobs-file.md, "Crontab").
func parseCrontab(file string, data []byte) ([]Job, error) {
	cjs, err := readCrontab(file, data)
	if err != nil {
		return nil, err
	}
	jobs := make([]Job, 0, len(cjs))
	for _, c := range cjs {
		j, err := build(file, c.line, c.f)
		if err != nil {
			return nil, err
		}
		j.Env = c.env
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// cronState is what the lines above a job line set for it.
type cronState struct {
	file    string
	env     map[string]string
	shell   string
	tz      string
	tzLine  int
	opts    []option // from "# once:" lines directly above
	optLine int      // the first of them, 0 when none
}

// readCrontab reads the lines of a crontab; each job line's keys are checked by build later.
func readCrontab(file string, data []byte) ([]cronJob, error) {
	st := &cronState{file: file, env: map[string]string{}, shell: "sh"}
	var jobs []cronJob
	lines := strings.Split(string(data), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1] // the final newline ends the last line
	}
	for i, raw := range lines {
		n := i + 1
		if !utf8.ValidString(raw) {
			return nil, errorf(file, n, "the line is not valid UTF-8: save the file as UTF-8")
		}
		if strings.IndexByte(raw, 0) >= 0 {
			return nil, errorf(file, n, "the line contains a NUL byte: remove it")
		}
		line := strings.TrimSpace(raw)
		body, isComment := strings.CutPrefix(line, "#")
		if rest, ok := onceOptions(body); isComment && ok {
			if err := st.options(n, rest); err != nil {
				return nil, err
			}
			continue
		}
		if st.optLine > 0 && (line == "" || isComment || !isJobLine(line)) {
			return nil, errorf(file, st.optLine, "a \"# once:\" line must be directly above its job line: move it there, or remove it")
		}
		switch {
		case line == "" || isComment:
		case isJobLine(line):
			j, err := st.job(n, line)
			if err != nil {
				return nil, err
			}
			jobs = append(jobs, j)
		default:
			if err := st.envLine(n, line); err != nil {
				return nil, err
			}
		}
	}
	if st.optLine > 0 {
		return nil, errorf(file, st.optLine, "a \"# once:\" line must be directly above its job line: add the job line, or remove it")
	}
	return jobs, nil
}

// onceOptions: body of a comment is "once:" (any case, spaces allowed before the colon) then options.
func onceOptions(body string) (string, bool) {
	b := strings.TrimSpace(body)
	if len(b) < 4 || !strings.EqualFold(b[:4], "once") {
		return "", false
	}
	rest := strings.TrimLeft(b[4:], " \t")
	if !strings.HasPrefix(rest, ":") {
		return "", false
	}
	return rest[1:], true
}

func isJobLine(line string) bool {
	c := line[0]
	return c == '@' || c == '*' || c >= '0' && c <= '9'
}

func (st *cronState) options(n int, text string) error {
	opts, msg := parseOptions(text)
	if msg != "" {
		return errorf(st.file, n, "# once: %s", msg)
	}
	for _, o := range opts {
		if !optionKey(o.key) {
			m := unknownKey(o.key, "\"# once:\" options", optionKey)
			if isJobKey(o.key) {
				m = fmt.Sprintf("%s cannot be a \"# once:\" option: the schedule is the line's time fields, the command the rest of the line, and env comes from NAME=value lines above it", o.key)
			}
			return errorf(st.file, n, "%s", m)
		}
		for _, p := range st.opts {
			if p.key == o.key {
				return errorf(st.file, n, "option %s is given twice (also on line %d): keep one", o.key, p.line)
			}
		}
		st.opts = append(st.opts, option{key: o.key, val: o.val, line: n})
	}
	if st.optLine == 0 {
		st.optLine = n
	}
	return nil
}

// parseOptions splits `key=value key2="quoted value"`; "" or what is wrong.
func parseOptions(s string) ([]option, string) {
	var out []option
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return out, ""
		}
		eq := strings.IndexByte(s, '=')
		if sp := strings.IndexAny(s, " \t"); eq <= 0 || (sp >= 0 && sp < eq) {
			w, _, _ := strings.Cut(s, " ")
			return nil, fmt.Sprintf("%q is not key=value: write options as key=value or key=\"a value with spaces\"", w)
		}
		key, rest := s[:eq], s[eq+1:]
		var val string
		if strings.HasPrefix(rest, `"`) {
			end := closingQuote(rest)
			if end < 0 {
				return nil, fmt.Sprintf("the value of %s has no closing double quote: add it", key)
			}
			v, err := strconv.Unquote(rest[:end+1])
			if err != nil {
				return nil, fmt.Sprintf("the value of %s is not a valid quoted string: escape \" and \\ with a backslash", key)
			}
			val, rest = v, rest[end+1:]
			if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
				return nil, fmt.Sprintf("the value of %s goes on after its closing quote: put a space after it", key)
			}
		} else {
			end := strings.IndexAny(rest, " \t")
			if end < 0 {
				end = len(rest)
			}
			val, rest = rest[:end], rest[end:]
			if strings.ContainsAny(val, `"`) {
				return nil, fmt.Sprintf("the value of %s has a double quote inside: write the whole value in double quotes, with \\\" for a quote", key)
			}
		}
		out = append(out, option{key: key, val: val})
		s = rest
	}
}

// closingQuote is the index of the double quote that closes the one at s[0], or -1.
func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// envLine applies NAME=value to the job lines below it, as cron does; SHELL picks the shell,
// CRON_TZ the zone of the schedules, MAILTO and MAILFROM are ignored (once has notify).
func (st *cronState) envLine(n int, line string) error {
	name, val, ok := strings.Cut(line, "=")
	name = strings.TrimSpace(name)
	if !ok || checkEnvName(name) != "" && !strings.HasPrefix(name, "ONCE_") {
		return errorf(st.file, n, "not a crontab line: want MIN HOUR DOM MON DOW COMMAND (or @daily COMMAND), NAME=value, or a # comment (a user field, as in /etc/crontab, is not supported)")
	}
	if msg := checkEnvName(name); msg != "" {
		return errorf(st.file, n, "%s", msg)
	}
	val = strings.TrimSpace(val)
	if len(val) >= 2 && (val[0] == '"' || val[0] == '\'') && val[len(val)-1] == val[0] {
		val = val[1 : len(val)-1]
	}
	switch name {
	case "MAILTO", "MAILFROM":
	case "CRON_TZ":
		st.tz, st.tzLine = val, n
	case "SHELL":
		if !strings.HasPrefix(val, "/") {
			return errorf(st.file, n, "SHELL %q is not an absolute path: give one such as /bin/bash", val)
		}
		st.shell = val
		st.env[name] = val
	default:
		st.env[name] = val
	}
	return nil
}

// job reads one job line with the options above it.
func (st *cronState) job(n int, line string) (cronJob, error) {
	schedule, cmd, msg := splitCronLine(line)
	if msg != "" {
		return cronJob{}, errorf(st.file, n, "%s", msg)
	}
	cmd, msg = unescapePercent(cmd)
	if msg != "" {
		return cronJob{}, errorf(st.file, n, "%s", msg)
	}
	c := cronJob{line: n, command: cmd, shell: st.shell, opts: st.opts, cronTZ: st.tz, f: fields{
		"schedule": {v: schedule, line: n},
		"command":  {v: []string{st.shell, "-c", cmd}, line: n},
		"name":     {v: DeriveName(cmd), line: n},
	}}
	if st.tz != "" {
		c.f["tz"] = value{v: st.tz, line: st.tzLine, from: " (from CRON_TZ)"}
	}
	for _, o := range st.opts {
		c.f[o.key] = value{v: optText(o.val), line: o.line}
		c.named = c.named || o.key == "name"
	}
	for k, v := range st.env {
		c.env = append(c.env, k+"="+v)
	}
	sort.Strings(c.env)
	st.opts, st.optLine = nil, 0
	return c, nil
}

// splitCronLine splits a job line into its schedule and its command.
//
// Five time fields, or six (a leading seconds field) when the sixth word is a cron field and a
// seventh word follows; a sixth word that is a day name ("mon", "MON-FRI") could be either, and is
// refused (docs/jobs-file.md, "Seconds").
func splitCronLine(line string) (schedule, command, msg string) {
	if strings.HasPrefix(line, "@") {
		w, rest := nextWord(line)
		switch w {
		case "@reboot":
			return "", "", "@reboot is not supported: once daemon runs jobs on a schedule; start this command at boot from systemd or your init system"
		case "@every":
			d, rest2 := nextWord(rest)
			if d == "" || rest2 == "" {
				return "", "", "want @every DURATION COMMAND, such as @every 5m /usr/local/bin/poll"
			}
			return "@every " + d, rest2, ""
		}
		if rest == "" {
			return "", "", fmt.Sprintf("no command after %s: write %s COMMAND", w, w)
		}
		return w, rest, ""
	}
	words, at := fieldsAt(line, 7)
	if len(words) < 6 {
		return "", "", "want 5 time fields and a command: MIN HOUR DOM MON DOW COMMAND, such as 0 2 * * * /usr/local/bin/backup"
	}
	sixth := words[5]
	if len(words) == 7 && isDowField(sixth) {
		if strings.ContainsFunc(sixth, func(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }) {
			return "", "", fmt.Sprintf("%q could be a day-of-week field after a seconds field or the command: for seconds write the day as a number (1 for mon), else write the command's path (/usr/bin/%s)", sixth, sixth)
		}
		return strings.Join(words[:6], " "), strings.TrimSpace(line[at[6]:]), ""
	}
	return strings.Join(words[:5], " "), strings.TrimSpace(line[at[5]:]), ""
}

// fieldsAt is the first n blank-separated words of s, and the offset of each.
func fieldsAt(s string, n int) (words []string, at []int) {
	i := 0
	for len(words) < n {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i == len(s) {
			break
		}
		j := i
		for j < len(s) && s[j] != ' ' && s[j] != '\t' {
			j++
		}
		words, at = append(words, s[i:j]), append(at, i)
		i = j
	}
	return words, at
}

// isDowField: w is valid as the day-of-week field of a schedule.
func isDowField(w string) bool {
	_, err := slot.New("", "* * * * "+w, "", "UTC")
	return err == nil
}

// nextWord is the first blank-separated word of s and the rest, trimmed.
func nextWord(s string) (string, string) {
	s = strings.TrimLeft(s, " \t")
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// unescapePercent: cron turns an unescaped % into a newline and feeds the rest to standard input;
// once refuses that rather than guess, and turns \% into %.
func unescapePercent(cmd string) (string, string) {
	var b strings.Builder
	for i := 0; i < len(cmd); i++ {
		switch {
		case cmd[i] == '\\' && i+1 < len(cmd) && cmd[i+1] == '%':
			b.WriteByte('%')
			i++
		case cmd[i] == '%':
			return "", "the command has a % that is not escaped: cron would make it a newline and standard input; write \\% for a literal % (date +\\%F), or move the command into a script"
		default:
			b.WriteByte(cmd[i])
		}
	}
	return b.String(), ""
}

// DeriveName is the job name of a crontab line without "# once: name=…": the base name of the
// command's first word (leading NAME=value words skipped), with characters outside the task alphabet
// turned into '_' and cut to 48 bytes, then '-' and the first 8 hex digits of the SHA-256 of the
// whole command text (as sh -c gets it). The same command gives the same name; a changed command
// gives a new name (a new task, with its own history).
func DeriveName(command string) string {
	words := strings.Fields(command)
	first := ""
	for _, w := range words {
		if k, _, ok := strings.Cut(w, "="); ok && k != "" && checkEnvName(strings.TrimPrefix(k, "ONCE_")) == "" {
			continue
		}
		first = w
		break
	}
	if i := strings.LastIndexByte(first, '/'); i >= 0 {
		first = first[i+1:]
	}
	b := []byte(first)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:@-", c) >= 0) {
			b[i] = '_'
		}
	}
	if len(b) > 48 {
		b = b[:48]
	}
	if len(b) == 0 {
		b = []byte("job")
	}
	sum := sha256.Sum256([]byte(command))
	return string(b) + "-" + hex.EncodeToString(sum[:4])
}
