package metrics

import (
	"bufio"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file writes Prometheus' text exposition format (version 0.0.4) by hand. The Prometheus
// client library did it before; it is not linked any more because its package init (the default
// registry, its Go and process collectors, protobuf descriptors, procfs) ran in every once
// process, `once run` and its shim included, ~190 page faults and ~2 ms of CPU each (docs/benchmarks.md).

// desc is one metric family: its name, help, type and label names (values are given in this
// order; they are written sorted by name, as the Prometheus client did).
type desc struct {
	name, help, typ string
	labels          []string
	order           []int // indexes of labels, sorted by name
}

func newDesc(typ, name, help string, labels ...string) *desc {
	order := make([]int, len(labels))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(labels[a], labels[b]) })
	return &desc{name: name, help: help, typ: typ, labels: labels, order: order}
}

// series is the lines of one series of a family, keyed by its labels for sorting: a histogram's
// buckets, sum and count stay together and in order, as the format requires.
type series struct {
	key   string
	lines string
}

// sink collects the series of one scrape, by family.
type sink struct {
	fams map[*desc][]series
	buf  []byte
}

func newSink() *sink { return &sink{fams: map[*desc][]series{}} }

// labelSet renders {name="value",...} for d's label names (none: ""), with extra appended last.
func (s *sink) labelSet(d *desc, values []string, extra ...string) []byte {
	b := s.buf[:0]
	if len(d.labels) == 0 && len(extra) == 0 {
		return b
	}
	b = append(b, '{')
	for i, j := range d.order {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendLabel(b, d.labels[j], values[j])
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if len(d.labels) > 0 || i > 0 {
			b = append(b, ',')
		}
		b = appendLabel(b, extra[i], extra[i+1])
	}
	return append(b, '}')
}

func appendLabel(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, '=', '"')
	b = appendEscaped(b, value, true)
	return append(b, '"')
}

// appendEscaped escapes a label value (backslash, quote, newline) or a help text (backslash,
// newline), and replaces invalid UTF-8, which the format does not allow.
func appendEscaped(b []byte, v string, quote bool) []byte {
	if !utf8.ValidString(v) {
		v = strings.ToValidUTF8(v, "\uFFFD")
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			b = append(b, '\\', '\\')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '"' && quote:
			b = append(b, '\\', '"')
		default:
			b = append(b, c)
		}
	}
	return b
}

func appendValue(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// line appends "NAME{LABELS} VALUE\n".
func line(b []byte, name, suffix string, labels []byte, v float64) []byte {
	b = append(b, name...)
	b = append(b, suffix...)
	b = append(b, labels...)
	b = append(b, ' ')
	b = appendValue(b, v)
	return append(b, '\n')
}

// sample adds one series of a gauge or counter with the label values given, in d's order.
func (s *sink) sample(d *desc, v float64, values ...string) {
	ls := s.labelSet(d, values)
	key := string(ls)
	s.buf = ls
	s.fams[d] = append(s.fams[d], series{key: key, lines: string(line(nil, d.name, "", ls, v))})
}

func (s *sink) gauge(d *desc, v float64, values ...string)   { s.sample(d, v, values...) }
func (s *sink) counter(d *desc, v float64, values ...string) { s.sample(d, v, values...) }

// histogram adds one series of a histogram: cumulative counts by upper bound (+Inf is count).
func (s *sink) histogram(d *desc, count uint64, sum float64, bounds []float64, cumulative []uint64, values ...string) {
	key := string(s.labelSet(d, values))
	var b []byte
	for i, ub := range bounds {
		le := string(appendValue(nil, ub))
		b = line(b, d.name, "_bucket", s.labelSet(d, values, "le", le), float64(cumulative[i]))
	}
	b = line(b, d.name, "_bucket", s.labelSet(d, values, "le", "+Inf"), float64(count))
	b = line(b, d.name, "_sum", []byte(key), sum)
	b = line(b, d.name, "_count", []byte(key), float64(count))
	s.fams[d] = append(s.fams[d], series{key: key, lines: string(b)})
}

// summary adds a summary without labels: quantiles (pairs of quantile and value), sum and count.
func (s *sink) summary(d *desc, count uint64, sum float64, quantiles [][2]float64) {
	var b []byte
	for _, q := range quantiles {
		b = line(b, d.name, "", s.labelSet(d, nil, "quantile", string(appendValue(nil, q[0]))), q[1])
	}
	b = line(b, d.name, "_sum", nil, sum)
	b = line(b, d.name, "_count", nil, float64(count))
	s.fams[d] = append(s.fams[d], series{lines: string(b)})
}

// write writes the families sorted by name, each series sorted by its labels as written (promhttp
// sorted by label values: the same order but for values that are prefixes of others).
func (s *sink) write(w io.Writer) error {
	ds := make([]*desc, 0, len(s.fams))
	for d := range s.fams {
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(a, b *desc) int { return strings.Compare(a.name, b.name) })
	bw := bufio.NewWriterSize(w, 32<<10)
	var b []byte
	for _, d := range ds {
		ss := s.fams[d]
		slices.SortFunc(ss, func(a, b series) int { return strings.Compare(a.key, b.key) })
		b = append(b[:0], "# HELP "...)
		b = append(b, d.name...)
		b = append(b, ' ')
		b = appendEscaped(b, d.help, false)
		b = append(b, "\n# TYPE "...)
		b = append(b, d.name...)
		b = append(b, ' ')
		b = append(b, d.typ...)
		b = append(b, '\n')
		if _, err := bw.Write(b); err != nil {
			return err
		}
		for _, x := range ss {
			if _, err := bw.WriteString(x.lines); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}
