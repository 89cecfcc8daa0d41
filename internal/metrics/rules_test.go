package metrics

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

const (
	rulesFile     = "../../deploy/prometheus/once-rules.yml"
	rulesTestFile = "../../deploy/prometheus/once-rules.test.yml"
	metricsDoc    = "../../docs/metrics.md"
)

// exported are the names of the metric families the collector can export.
func exported() map[string]bool {
	names := map[string]bool{}
	for _, d := range allDescs {
		names[d.name] = true
	}
	return names
}

var metricName = regexp.MustCompile(`\bonce_[a-z_]+`)

// TestRulesAndDocsNameRealMetrics: every once_ name in the alert rules is a metric the collector
// exports, and docs/metrics.md describes every one of them.
func TestRulesAndDocsNameRealMetrics(t *testing.T) {
	names := exported()
	for _, f := range []string{rulesFile, rulesTestFile, metricsDoc} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range metricName.FindAllString(string(data), -1) {
			base := n
			for _, s := range []string{"_bucket", "_count", "_sum"} {
				if b, ok := strings.CutSuffix(n, s); ok && names[b] {
					base = b
				}
			}
			if !names[base] && !strings.HasPrefix(n, "once_test") {
				t.Errorf("%s names %s, which the collector does not export", f, n)
			}
		}
	}
	doc, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	for n := range names {
		if !strings.Contains(string(doc), "`"+n+"`") {
			t.Errorf("docs/metrics.md does not describe `%s`", n)
		}
	}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	exprs := regexp.MustCompile(`(?m)^\s*(expr: .*)$`).FindAllStringSubmatch(string(rules), -1)
	if len(exprs) < 8 {
		t.Fatalf("%d rules in %s", len(exprs), rulesFile)
	}
	for _, e := range exprs {
		if !strings.Contains(string(doc), "`"+e[1]+"`") {
			t.Errorf("docs/metrics.md does not show the rule `%s`", e[1])
		}
	}
}

// TestRulesPromtool checks the rules and runs their unit tests with promtool, as docs/metrics.md
// says.
func TestRulesPromtool(t *testing.T) {
	bin := need(t, "promtool", "prometheus")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
