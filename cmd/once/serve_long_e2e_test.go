package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestServeLongValuesWrap: values at their limits without a space (a 200-byte task name and slot,
// a 255-byte holder, a 4,096-byte note and checkpoint: a URL, a token, base64) wrap in their
// cells, as a page of an incident should: the review page was 34,591 px wide in a 1,280 px window,
// its box and its form beside the first screen.
func TestServeLongValuesWrap(t *testing.T) {
	chrome := chromiumPath(t)
	e, _ := dashEnv(t)
	task, slot, holder := strings.Repeat("T", 200), strings.Repeat("s", 200), strings.Repeat("h", 255)
	long := "https://example.com/" + strings.Repeat("a", 4000)
	r := e.run("run", "--task", task, "--slot", slot, "--holder", holder, "--max-attempts", "1", "--", "sh", "-c",
		fmt.Sprintf(`%s report --note "$1" --checkpoint "$1"; exit 2`, bin), "sh", long)
	if r.code != 2 {
		t.Fatalf("seed: %d %s", r.code, r.stderr)
	}
	base := startServe(t, e, "--listen", "127.0.0.1:0")
	b := newBrowser(t, chrome, t.TempDir())
	for _, p := range []string{"/", "/review", "/timeline?task=" + task, "/slot?task=" + task + "&slot=" + slot} {
		b.open(base + p)
		if w := evalJS[int](b, `document.documentElement.scrollWidth`); w > 1280 {
			t.Errorf("%.40s…: the page is %d px wide in a 1280 px window", p, w)
		}
	}
	// The task's name stays in its column of the timeline: at 300 px into the drawing, on its
	// row, is the drawing, not the name's text running over the bars.
	b.open(base + "/timeline?task=" + task)
	b.waitJS(`document.querySelector("svg.timeline text.label") !== null`, 5*time.Second)
	hit := evalJS[string](b, `(() => { const s = document.querySelector("svg.timeline").getBoundingClientRect(),
		l = document.querySelector("svg.timeline text.label").getBoundingClientRect();
		const e = document.elementFromPoint(s.left + 300, l.top + l.height / 2); return e.tagName + "." + e.getAttribute("class"); })()`)
	if strings.HasPrefix(hit, "text.") {
		t.Errorf("the timeline: the task's name runs over the bars (%s at 300 px)", hit)
	}
}
