package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// ruleFile is Prometheus's rule file format, as much of it as the rules
// use; decoding refuses any other key (a typo such as "anotations").
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// deploy/prometheus-rules.yml parses as a rule file; every rule has an
// alert name, an expression, a valid "for", and says what it means
// (summary, description) and links to what to do (runbook_url: a heading
// of docs/operations.md as installed in /usr/share/doc/botctl), and has no
// other annotation; it asks only for metrics docs/operations.md documents,
// and the docs' alert table lists each rule with the same expression.
// promtool, where installed, checks it too.
func TestPrometheusRules(t *testing.T) {
	r := repo(t)
	path := filepath.Join(r, "deploy", "prometheus-rules.yml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	docsRaw, err := os.ReadFile(filepath.Join(r, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs := string(docsRaw)
	anchors := headingAnchors(docs)
	// The metrics table's rows start "| `botctl_…`", a row may name
	// several in its first cell.
	documented := map[string]bool{}
	for _, line := range strings.Split(docs, "\n") {
		if !strings.HasPrefix(line, "| `botctl_") {
			continue
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
		for _, name := range regexp.MustCompile("`(botctl_[a-z_]+)`").FindAllStringSubmatch(cell, -1) {
			documented[name[1]] = true
		}
	}
	if len(documented) == 0 {
		t.Fatal("no metric found in docs/operations.md's metrics table")
	}
	metric := regexp.MustCompile(`botctl_[a-z_]+`)
	seen := map[string]bool{}
	rules := 0
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("a group without a name or rules: %+v", g)
		}
		for _, rule := range g.Rules {
			rules++
			name := rule.Alert
			if name == "" || seen[name] {
				t.Errorf("rule %d of group %s: alert name %q empty or repeated", rules, g.Name, name)
			}
			seen[name] = true
			if strings.TrimSpace(rule.Expr) == "" {
				t.Errorf("%s: no expr", name)
			}
			if rule.For != "" {
				if _, err := time.ParseDuration(rule.For); err != nil {
					t.Errorf("%s: for %q: %v", name, rule.For, err)
				}
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(rule.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation (what it means, where to read what to do)", name, a)
				}
			}
			for a := range rule.Annotations {
				if a != "summary" && a != "description" && a != "runbook_url" {
					t.Errorf("%s: annotation %q: want only summary, description and runbook_url", name, a)
				}
			}
			if u := rule.Annotations["runbook_url"]; u != "" {
				page, anchor, ok := strings.Cut(u, "#")
				if page != runbookPage || !ok {
					t.Errorf("%s: runbook_url %q: want %s#ANCHOR", name, u, runbookPage)
				} else if !anchors[anchor] {
					t.Errorf("%s: runbook_url %q: docs/operations.md has no heading with anchor #%s", name, u, anchor)
				}
			}
			for _, m := range metric.FindAllString(rule.Expr, -1) {
				base := m // a histogram's series are its name's
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if documented[strings.TrimSuffix(m, suffix)] {
						base = strings.TrimSuffix(m, suffix)
					}
				}
				if !documented[base] {
					t.Errorf("%s: expr asks for %s, which docs/operations.md's metrics table does not list", name, m)
				}
			}
			if !strings.Contains(docs, "| `"+name+"` | `"+rule.Expr+"`") {
				t.Errorf("%s: docs/operations.md's alert table has no row \"| `%s` | `%s`\"", name, name, rule.Expr)
			}
		}
	}
	if rules == 0 {
		t.Fatal("no rules")
	}

	if !anchors["prometheus-alerts-what-each-means-what-to-do"] {
		t.Error("headingAnchors does not find the alerts section's anchor: the runbook_url check checks nothing")
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not found: the expressions' syntax is not checked here")
		return
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// runbookPage is docs/operations.md where scripts/install.sh (and a
// package) installs it, and where botctl.service's Documentation= points.
const runbookPage = "file:///usr/share/doc/botctl/operations.md"

// headingAnchors returns the anchors of md's headings as GitHub makes
// them: lower case, punctuation but '-' and '_' dropped, spaces as '-'.
// Repeated headings' "-1" suffixes are not made: a runbook links to a
// heading that is unique.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}
