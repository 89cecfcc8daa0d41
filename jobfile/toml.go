package jobfile

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/once-run/once/slot"
	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// parseTOML reads the TOML form: an optional [defaults] table and [[job]] tables.
//
// go-toml decodes the document (its syntax errors and duplicate keys carry a line); a second pass
// over go-toml's parser finds the line of every key, so that a value's error points at its key.
func parseTOML(file string, data []byte) ([]Job, error) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, _ := de.Position()
			return nil, errorf(file, line, "TOML syntax: %s: fix the line (strings in double quotes, one key = value per line)", strings.TrimPrefix(de.Error(), "toml: "))
		}
		return nil, errorf(file, 0, "TOML: %s", oneLine(err.Error()))
	}
	at := indexLines(data)
	top := sortedKeys(doc, at, nil)
	var defaults map[string]any
	for _, k := range top {
		switch k {
		case "defaults", "job":
		default:
			msg := fmt.Sprintf("unknown key %q at the top level: a jobs file has a [defaults] table and [[job]] tables", k)
			if strings.HasPrefix(k, "job") || strings.HasPrefix(k, "default") {
				msg = fmt.Sprintf("unknown table %q: did you mean [[job]] or [defaults]?", k)
			}
			return nil, errorf(file, at.line(k), "%s", msg)
		}
	}
	if d, ok := doc["defaults"]; ok {
		m, ok := d.(map[string]any)
		if !ok {
			return nil, errorf(file, at.line("defaults"), "defaults must be a table: write [defaults] on a line of its own, then key = value lines")
		}
		for _, k := range sortedKeys(m, at, []string{"defaults"}) {
			if !defaultsKey(k) {
				msg := unknownKey(k, "[defaults]", defaultsKey)
				if isJobKey(k) {
					msg = fmt.Sprintf("%s cannot be in [defaults]: give it in each [[job]]", k)
				}
				return nil, errorf(file, at.line("defaults", k), "%s", msg)
			}
			if msg := checkDefault(k, m[k]); msg != "" { // also when every job gives its own
				return nil, errorf(file, at.line("defaults", k), "%s (in [defaults])", msg)
			}
		}
		defaults = m
	}
	list, ok := doc["job"]
	if !ok {
		return nil, nil
	}
	arr, ok := list.([]any)
	if !ok {
		return nil, errorf(file, at.line("job"), "write each job as a [[job]] table (double brackets), with name = \"…\" inside")
	}
	jobs := make([]Job, 0, len(arr))
	for i, x := range arr {
		j, err := tomlJob(file, at, i, x, defaults)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// tomlJob validates the i-th [[job]] table, with the [defaults] under it.
func tomlJob(file string, at *lineIndex, i int, x any, defaults map[string]any) (Job, error) {
	idx := strconv.Itoa(i)
	start := at.line("job", idx)
	m, ok := x.(map[string]any)
	if !ok {
		return Job{}, errorf(file, start, "job %d is not a table: write it as a [[job]] table", i+1)
	}
	f := fields{}
	for k, v := range defaults {
		f[k] = value{v: v, line: at.line("defaults", k), from: " (from [defaults])"}
	}
	for _, k := range sortedKeys(m, at, []string{"job", idx}) {
		if !isJobKey(k) {
			return Job{}, errorf(file, at.line("job", idx, k), "%s", unknownKey(k, "[[job]]", isJobKey))
		}
		v := m[k]
		if dm, ok := f["env"].v.(map[string]any); ok && k == "env" {
			if jm, ok := v.(map[string]any); ok { // the job's env adds to, and overrides, the defaults'
				merged := make(map[string]any, len(dm)+len(jm))
				for n, s := range dm {
					merged[n] = s
				}
				for n, s := range jm {
					merged[n] = s
				}
				v = merged
			}
		}
		f[k] = value{v: v, line: at.line("job", idx, k)}
	}
	return build(file, start, f)
}

// checkDefault validates one [defaults] key's value on its own; "" when good.
func checkDefault(k string, v any) string {
	if msg := set(&Job{}, k, v); msg != "" {
		return msg
	}
	if s, ok := v.(string); ok && k == "tz" {
		if _, err := slot.New("", "", "", s); err != nil {
			return flagWords.Replace(err.Error())
		}
	}
	return ""
}

// sortedKeys are m's keys in the order they appear in the file, so that the first error reported
// is the first in the file.
func sortedKeys(m map[string]any, at *lineIndex, prefix []string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		la, lb := at.line(append(prefix[:len(prefix):len(prefix)], keys[a])...), at.line(append(prefix[:len(prefix):len(prefix)], keys[b])...)
		if la != lb {
			return la < lb
		}
		return keys[a] < keys[b]
	})
	return keys
}

// lineIndex maps a key's path (array elements by index) to the line where the file first names it.
type lineIndex struct {
	data   []byte
	starts []int // offset of each line's first byte
	lines  map[string]int
	arrays map[string]int // [[array]] tables seen so far, by path
}

func (x *lineIndex) line(path ...string) int { return x.lines[strings.Join(path, "\x00")] }

func (x *lineIndex) lineAt(off uint32) int {
	return sort.Search(len(x.starts), func(i int) bool { return x.starts[i] > int(off) })
}

func (x *lineIndex) record(path []string, line int) {
	k := strings.Join(path, "\x00")
	if _, ok := x.lines[k]; !ok {
		x.lines[k] = line
	}
}

// indexLines walks a document go-toml has already accepted and records the line of each key.
func indexLines(data []byte) *lineIndex {
	x := &lineIndex{data: data, starts: []int{0}, lines: map[string]int{}, arrays: map[string]int{}}
	for i, c := range data {
		if c == '\n' {
			x.starts = append(x.starts, i+1)
		}
	}
	var p unstable.Parser
	p.Reset(data)
	var cur []string
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			cur = x.header(e, e.Kind == unstable.ArrayTable)
		case unstable.KeyValue:
			x.keyValue(cur, e)
		}
	}
	return x
}

// header resolves a [table] or [[array]] header to its path: a name that is an array of tables
// stands for its last element so far.
func (x *lineIndex) header(e *unstable.Node, array bool) []string {
	var path []string
	var line int
	it := e.Key()
	for it.Next() {
		n := it.Node()
		line = x.lineAt(n.Raw.Offset)
		path = append(path, string(n.Data))
		k := strings.Join(path, "\x00")
		if it.IsLast() && array {
			x.record(path, line)
			x.arrays[k]++
			path = append(path, strconv.Itoa(x.arrays[k]-1))
		} else if c, ok := x.arrays[k]; ok {
			path = append(path, strconv.Itoa(c-1))
		}
		x.record(path, line)
	}
	return path
}

// keyValue records a (dotted) key and, for inline tables and arrays of them, the keys inside.
func (x *lineIndex) keyValue(cur []string, e *unstable.Node) {
	path := append([]string(nil), cur...)
	it := e.Key()
	for it.Next() {
		n := it.Node()
		path = append(path, string(n.Data))
		x.record(path, x.lineAt(n.Raw.Offset))
	}
	x.value(path, e.Value(), x.lineAt(e.Raw.Offset))
}

func (x *lineIndex) value(path []string, v *unstable.Node, line int) {
	switch v.Kind {
	case unstable.InlineTable:
		kids := v.Children()
		for kids.Next() {
			if kv := kids.Node(); kv.Kind == unstable.KeyValue {
				x.keyValue(path, kv)
			}
		}
	case unstable.Array:
		kids := v.Children()
		for i := 0; kids.Next(); i++ {
			el := append(path[:len(path):len(path)], strconv.Itoa(i))
			n := kids.Node()
			l := line
			if n.Raw.Length > 0 || n.Raw.Offset > 0 {
				l = x.lineAt(n.Raw.Offset)
			}
			x.record(el, l)
			x.value(el, n, l)
		}
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
