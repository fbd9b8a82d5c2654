package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/dataplane"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/heal/incident"
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
	js := testenv.StartJetStream(t, dataplane.Options{})
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
