package web

import (
	"bytes"
	"fmt"
	"html"
	"net/url"
	"reflect"
)

// The dashboard's HTML is written by Go code (render.go), not by html/template: text/template
// calls methods by name through reflection, and a binary that links it keeps every exported
// method of every type it has (the linker cannot tell which a template may call): 17 MB more
// in the once binary, paid by every once run. The one rule that keeps the pages safe is here:
// every value put in a page is escaped for HTML (text and quoted attributes alike) unless it is
// of type safe, which only this package's own markup builders return.

// safe is markup built by this package: put in a page as it is.
type safe string

// page is a page being written.
type page struct{ b bytes.Buffer }

// p writes format with its arguments, each escaped for HTML unless it is safe. Formats put
// arguments in element text or in double-quoted attributes only.
func (w *page) p(format string, args ...any) {
	for i, a := range args {
		args[i] = escapeArg(a)
	}
	fmt.Fprintf(&w.b, format, args...)
}

func escapeArg(a any) any {
	switch v := a.(type) {
	case safe:
		return string(v)
	case string:
		return html.EscapeString(v)
	case error:
		return html.EscapeString(v.Error())
	case fmt.Stringer:
		return html.EscapeString(v.String())
	}
	if rv := reflect.ValueOf(a); rv.Kind() == reflect.String {
		return html.EscapeString(rv.String())
	}
	return a // numbers
}

// q is a value for a URL's query, escaped for the query and then for the attribute it is in.
func q(s string) safe { return safe(html.EscapeString(url.QueryEscape(s))) }

// esc is s escaped for HTML, as safe markup.
func esc(s string) safe { return safe(html.EscapeString(s)) }
