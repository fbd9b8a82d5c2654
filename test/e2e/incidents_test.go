package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/test/e2e/cluster"
)

func incidentsCLI(t *testing.T, c *cluster.Cluster, args ...string) string {
	t.Helper()
	code, stdout, stderr, err := cluster.Run(bin, 30*time.Second, append(append([]string{"incidents"}, args...), "--nats", c.NATSURL)...)
	if err != nil || code != 0 {
		t.Fatalf("botctl incidents %v: exit %d %v\n%s%s", args, code, err, stdout, stderr)
	}
	return stdout
}

// incidents is `botctl incidents list --json [args]`, decoded as the
// incident store's own records (the CLI prints them as they are).
func incidents(t *testing.T, c *cluster.Cluster, args ...string) []incident.Incident {
	t.Helper()
	var out struct {
		Incidents []incident.Incident `json:"incidents"`
	}
	raw := incidentsCLI(t, c, append([]string{"list", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatalf("incidents list --json: %v\n%s", err, raw)
	}
	return out.Incidents
}

// Two outages seen from outside: a dropped connection and a leader killed
// with SIGKILL. Each is one incident, with its three times, closed
// without a person; the report adds them up; a message sent while no node
// held the bot is answered after recovery.
func TestIncidentsOfADropAndACrash(t *testing.T) {
	t.Parallel()
	c := newCluster(t, []string{"b1"})
	startNodes(t, c, 2)
	waitStable(t, c)

	if err := c.Fault("b1", "drop", 0); err != nil {
		t.Fatal(err)
	}
	var first incident.Incident
	testwait.NoError(t, 60*time.Second, testwait.Every, "the drop's incident closed", func() error {
		all := incidents(t, c, "--bot", "b1")
		if len(all) != 1 || all[0].State != "closed" {
			return fmt.Errorf("incidents: %+v", all)
		}
		first = all[0]
		return nil
	})
	if first.Signal != "connection" || first.Method != "auto" || first.FirstAction.IsZero() || first.DataComplete.IsZero() {
		t.Fatalf("drop incident: %+v", first)
	}

	// Kill the leader; a message sent meanwhile is answered late.
	leaders := waitStable(t, c)
	old := c.Node(leaders["b1"])
	old.Proc.Kill()
	if _, err := c.PostMessage("b1", "dave", "are you there"); err != nil {
		t.Fatal(err)
	}
	var second incident.Incident
	testwait.NoError(t, 90*time.Second, testwait.Every, "the crash's incident closed", func() error {
		all := incidents(t, c, "--bot", "b1")
		if len(all) != 2 || all[1].State != "closed" {
			return fmt.Errorf("incidents: %+v", all)
		}
		second = all[1]
		return nil
	})
	if second.Signal != "takeover" || second.Method != "auto" || second.Detected.Sub(second.Dropped) <= 0 {
		t.Fatalf("crash incident: %+v", second)
	}
	testwait.NoError(t, 60*time.Second, testwait.Every, "dave answered", func() error {
		tr, err := c.Transcript("b1", "dave")
		if err != nil {
			return err
		}
		for _, e := range tr {
			if e.From == "bot" && strings.Contains(e.Content, "are you there") && (e.Finished || e.Kind == "markdown") {
				return nil
			}
		}
		return fmt.Errorf("no answer yet: %+v", tr)
	})

	show := incidentsCLI(t, c, "show", second.ID)
	for _, want := range []string{"T1", "T2", "T3", "timeline", "takeover"} {
		if !strings.Contains(show, want) {
			t.Fatalf("incidents show lacks %q:\n%s", want, show)
		}
	}
	var rep struct {
		Bots []struct {
			Bot          string  `json:"bot"`
			Incidents    int     `json:"incidents"`
			SelfHealRate float64 `json:"self_heal_rate"`
			T1           struct {
				N int `json:"n"`
			} `json:"t1"`
		} `json:"bots"`
	}
	raw := incidentsCLI(t, c, "report", "--json", "--since", "1h")
	if err := json.Unmarshal([]byte(raw), &rep); err != nil {
		t.Fatalf("report --json: %v\n%s", err, raw)
	}
	if len(rep.Bots) != 1 || rep.Bots[0].Incidents != 2 || rep.Bots[0].SelfHealRate != 1 || rep.Bots[0].T1.N != 2 {
		t.Fatalf("report: %s", raw)
	}
	if code, _, stderr, _ := cluster.Run(bin, 30*time.Second, "incidents", "show", "nope", "--nats", c.NATSURL); code == 0 || !strings.Contains(stderr, "incidents list") {
		t.Fatalf("show of an unknown id: exit %d, %s", code, stderr)
	}
}
