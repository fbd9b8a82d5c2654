package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/metrics"
	"github.com/botctl/botctl/pkg/node"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// An open data incident (a final answer not delivered) is shown beside
// the open outage, in the table's INCIDENT column and as data_incident in
// the JSON; the outage stays where it was ("incident"). Then with the
// outage closed, the data incident alone is still shown: the bot is up but
// its users are owed something.
func TestStatusShowsOpenDataIncident(t *testing.T) {
	ep := startEtcd(t)
	js := testenv.StartJetStream(t, jetstream.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if err := node.SetGate(ctx, cli, prefix, "b1", "prod"); err != nil { // b1 is known to the cluster
		t.Fatal(err)
	}
	incs := incident.NewStore(js.Store.Incidents())
	now := time.Now().UTC()
	outage, err := incs.Open(ctx, incident.Incident{Bot: "b1", Kind: incident.Outage, Level: incident.Auto,
		Signal: incident.SignalConnection, Reason: "connection dropped", Dropped: now.Add(-time.Second), Detected: now})
	if err != nil {
		t.Fatal(err)
	}
	// A second later: incident IDs are the detection time to the
	// millisecond, and two detected at once would share one.
	data, err := incs.Open(ctx, incident.Incident{Bot: "b1", Kind: incident.Data, Level: incident.Human,
		Signal: incident.SignalDelivery, Reason: "a final answer could not be delivered", Dropped: now, Detected: now.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"status", "--etcd", ep, "--nats", js.Server.ClientURL()}

	out, err := run(t, append(args, "--json")...)
	if err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	var st struct {
		Bots []struct {
			ID           string             `json:"id"`
			Incident     *incident.Incident `json:"incident"`
			DataIncident *incident.Incident `json:"data_incident"`
		} `json:"bots"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if len(st.Bots) != 1 || st.Bots[0].ID != "b1" {
		t.Fatalf("bots %+v, want b1 alone\n%s", st.Bots, out)
	}
	b := st.Bots[0]
	if b.Incident == nil || b.Incident.ID != outage.ID || b.Incident.Kind != incident.Outage {
		t.Errorf("incident %+v, want the outage %s", b.Incident, outage.ID)
	}
	if b.DataIncident == nil || b.DataIncident.ID != data.ID || b.DataIncident.Kind != incident.Data || b.DataIncident.Level != incident.Human {
		t.Errorf("data_incident %+v, want the data incident %s", b.DataIncident, data.ID)
	}

	out, err = run(t, args...)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	row := botRow(t, out, "b1")
	if !strings.Contains(row, outage.ID+" auto open") || !strings.Contains(row, data.ID+" human open (data)") {
		t.Errorf("b1's row shows not both incidents:\n%s", out)
	}

	if _, err := incs.Update(ctx, "b1", outage.ID, func(i *incident.Incident) error { i.Close(time.Now()); return nil }); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, args...)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	if row := botRow(t, out, "b1"); strings.Contains(row, outage.ID) || !strings.Contains(row, data.ID+" human open (data)") {
		t.Errorf("with the outage closed, b1's row is not the data incident alone:\n%s", out)
	}
}

// botRow is the line of the table's bot section that starts with bot.
func botRow(t *testing.T, out, bot string) string {
	t.Helper()
	_, bots, ok := strings.Cut(out, "\nBOT ")
	if !ok {
		t.Fatalf("no bot table:\n%s", out)
	}
	for _, l := range strings.Split(bots, "\n") {
		if strings.HasPrefix(l, bot+" ") {
			return l
		}
	}
	t.Fatalf("no row for %s:\n%s", bot, out)
	return ""
}

// Each bot's model line sums its calls over the nodes and shows the
// slowest node's time to first token; a bot no node has called has none.
func TestStatusModelLine(t *testing.T) {
	st := Status{
		Nodes: []NodeStatus{
			{Model: map[string]metrics.ModelSummary{"b1": {Calls: 100, Errors: 1, TokensIn: 1000, TokensOut: 500, TTFTp50: 800, TTFTp99: 2100}}},
			{Model: map[string]metrics.ModelSummary{"b1": {Calls: 20, Errors: 1, TTFTp50: 900, TTFTp99: 1500}}},
			{Unreachable: "GET /status: 503"},
		},
		Bots: []BotStatus{{ID: "b1"}, {ID: "b2"}},
	}
	addModel(&st)
	if st.Bots[1].Model != nil {
		t.Errorf("b2's model %+v, want none", st.Bots[1].Model)
	}
	want := ModelStatus{Calls: 120, Errors: 2, TokensIn: 1000, TokensOut: 500, TTFTp50: 900, TTFTp99: 2100}
	if m := st.Bots[0].Model; m == nil || *m != want {
		t.Fatalf("b1's model %+v, want %+v", m, want)
	}
	var out strings.Builder
	printStatus(&out, st)
	if !strings.Contains(out.String(), "  b1  calls 120, errors 2 (1.7%), ttft p50 900ms p99 2.1s, tokens 1000 in / 500 out\n") {
		t.Errorf("status output lacks b1's model line:\n%s", out.String())
	}
	raw, _ := json.Marshal(st.Bots[0])
	if !strings.Contains(string(raw), `"model":{"calls":120,"errors":2,"tokens_in":1000,"tokens_out":500,"ttft_p50_ms":900,"ttft_p99_ms":2100}`) {
		t.Errorf("--json's bot: %s", raw)
	}
}

// A bot's override refused by nodes is shown per node with what each
// serves the bot with; a bot no node registers but one refuses is added;
// a node that applied it adds nothing.
func TestStatusSettingsRefused(t *testing.T) {
	st := Status{
		Nodes: []NodeStatus{
			{Info: node.Info{ID: "n1"}, settings: map[string]liveSettings{"b1": {Revision: 0, RefusedRevision: 12, Refused: "config key ai.openai.api_key_env: environment variable OPENAI_API_KEY is not set"}}},
			{Info: node.Info{ID: "n2"}, settings: map[string]liveSettings{"b1": {Revision: 9, RefusedRevision: 12, Refused: "config key ai.dify.api_key_file: not there"},
				"b9": {RefusedRevision: 20, Refused: "why"}}},
			{Info: node.Info{ID: "n3"}, settings: map[string]liveSettings{"b1": {Revision: 12}}},
		},
		Bots: []BotStatus{{ID: "b2"}, {ID: "b1"}},
	}
	addRefused(&st)
	if len(st.Bots) != 3 || st.Bots[0].ID != "b1" || st.Bots[1].ID != "b2" || st.Bots[2].ID != "b9" {
		t.Fatalf("bots %+v, want b1, b2, b9", st.Bots)
	}
	want := []SettingsRefusal{{Node: "n1", Revision: 12, Reason: "config key ai.openai.api_key_env: environment variable OPENAI_API_KEY is not set", Serving: 0},
		{Node: "n2", Revision: 12, Reason: "config key ai.dify.api_key_file: not there", Serving: 9}}
	if got := st.Bots[0].SettingsRefused; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("b1's settings_refused %+v, want %+v", got, want)
	}
	if st.Bots[1].SettingsRefused != nil {
		t.Errorf("b2's settings_refused %+v, want none", st.Bots[1].SettingsRefused)
	}
	var out strings.Builder
	printStatus(&out, st)
	for _, line := range []string{
		"b1, settings override in etcd refused (botctl bots show --bot b1; fix or clear it):\n",
		"  n1  revision 12 refused: config key ai.openai.api_key_env: environment variable OPENAI_API_KEY is not set; serves the bot with the config file's settings\n",
		"  n2  revision 12 refused: config key ai.dify.api_key_file: not there; serves the bot with the override of revision 9\n",
		"  n2  revision 20 refused: why;",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("status output lacks %q:\n%s", line, out.String())
		}
	}
	raw, _ := json.Marshal(st.Bots[0])
	if !strings.Contains(string(raw), `"settings_refused":[{"node":"n1","revision":12,"reason":"config key ai.openai.api_key_env: environment variable OPENAI_API_KEY is not set","serving":0},`) {
		t.Errorf("--json's bot: %s", raw)
	}
}
