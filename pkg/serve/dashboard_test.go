package serve

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// deploy/grafana/botctl.json asks only for metrics a node exposes: every
// metric named in a panel's query or a variable's is one the running
// node's registry describes (a histogram's _bucket, _sum and _count are
// its name's), and docs/operations.md's metrics table lists exactly the
// botctl_ metrics a node describes.
func TestDashboardAndDocsNameExposedMetrics(t *testing.T) {
	t.Parallel()
	e, ns := startEtcd(t), startNATS(t)
	rn, err := startNode(t, nodeConfig(t, startSim(t), e, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	exposed := map[string]bool{}
	for _, n := range rn.obs.metrics.Registry.Names() {
		exposed[n] = true
	}
	if !exposed["botctl_bot_leader"] || !exposed["botctl_incident_seconds"] || !exposed["botctl_api_sends_total"] {
		t.Fatalf("the node's registry names too little: %v", rn.obs.metrics.Registry.Names())
	}
	known := func(m string) bool {
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			if strings.HasSuffix(m, suffix) && exposed[strings.TrimSuffix(m, suffix)] {
				return true
			}
		}
		return false
	}
	metric := regexp.MustCompile(`\bbotctl_[a-z_]+`)

	raw, err := os.ReadFile("../../deploy/grafana/botctl.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Type, Title, Description string
			Datasource               *struct{ Type, UID string }    `json:"datasource"`
			Targets                  []struct{ Expr, RefID string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana/botctl.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Error("the dashboard has no title or uid")
	}
	queries := 0
	for _, v := range dash.Templating.List {
		for _, m := range metric.FindAllString(v.Definition, -1) {
			if !known(m) {
				t.Errorf("variable %s asks for %s, which a node does not expose", v.Name, m)
			}
		}
	}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Title == "" || p.Description == "" || p.Datasource == nil || len(p.Targets) == 0 {
			t.Errorf("panel %q: wants a title, a description, a datasource and a query", p.Title)
		}
		for _, q := range p.Targets {
			names := metric.FindAllString(q.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q query %s names no botctl metric: %s", p.Title, q.RefID, q.Expr)
			}
			for _, m := range names {
				queries++
				if !known(m) {
					t.Errorf("panel %q query %s asks for %s, which a node does not expose", p.Title, q.RefID, m)
				}
			}
		}
	}
	if queries < 20 {
		t.Errorf("only %d metric references in the dashboard's queries", queries)
	}

	docs, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(docs), "\n") {
		if !strings.HasPrefix(line, "| `botctl_") {
			continue
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
		for _, m := range metric.FindAllString(cell, -1) {
			documented[m] = true
			if !exposed[m] {
				t.Errorf("docs/operations.md's metrics table lists %s, which a node does not expose", m)
			}
		}
	}
	for m := range exposed {
		if strings.HasPrefix(m, "botctl_") && !documented[m] {
			t.Errorf("a node exposes %s, which docs/operations.md's metrics table does not list", m)
		}
	}
}
