package serve

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
)

// A task record that does not decode, put by hand under a task the bot's
// undelivered index names and whose queue message holds a conversation,
// before the node leads: the bot answers everyone else (before, the
// pusher's rebuild retried the record for ever and no answer went out),
// botctl_corrupt_records_total counts the skips, and the bot has one data
// incident (a person must look) that names the task once however often
// it is skipped. Past the deadline the sweep frees its conversation.
func TestCorruptRecordOpensOneDataIncidentAndTheRestFlows(t *testing.T) {
	t.Parallel()
	sim, addr := startSimServer(t)
	e, ns := startEtcd(t), startNATS(t)
	store, _ := testenv.DeclareOnCluster(t, []string{ns.ClientURL()}, jetstream.Options{})
	ctx := context.Background()
	bad := task.ID("b1", "lost")
	if _, err := store.Tasks().Put(ctx, bad, []byte(`{"id": "`+bad+`", "bot": "b1", "exec": "runn`)); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkUndelivered(ctx, "b1", bad); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(task.Message{TaskID: bad, Bot: "b1", MsgID: "lost", Chat: "carol", Question: "lost", Received: time.Now()})
	if _, err := store.PublishTask(ctx, "b1", "carol", "lost", raw); err != nil {
		t.Fatal(err)
	}

	cfg := nodeConfig(t, "ws://"+addr+"/", e, ns.ClientURL())
	cfg.AI.Demo.AnswerTime = 200 * time.Millisecond
	rn, err := startNode(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	answered := func(user, question string) bool {
		for _, m := range sim.Transcript("b1", user) {
			if m.From == "bot" && m.Finished && strings.Contains(m.Content, "You asked: "+question) {
				return true
			}
		}
		return false
	}
	if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "bob", Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "bob answered", func() bool { return answered("bob", "hello") })
	testwait.Eventually(t, time.Minute, "the skip counted", func() bool {
		return strings.Contains(rn.scrape(t), `botctl_corrupt_records_total{bot="b1",where="rebuild"} `)
	})

	incidents := incident.NewStore(rn.Store.Incidents())
	var inc *incident.Incident
	testwait.Eventually(t, time.Minute, "a data incident for the corrupt record", func() bool {
		inc, err = incidents.OpenFor(ctx, "b1", incident.Data)
		return err == nil && inc != nil
	})
	if inc.Signal != incident.SignalCorrupt || inc.Level != incident.Human || !strings.Contains(inc.Reason, bad) || !strings.Contains(inc.Next, store.Tasks().Bucket()) {
		t.Fatalf("incident: signal %s, level %s, reason %q, next %q", inc.Signal, inc.Level, inc.Reason, inc.Next)
	}

	// Skipped again, twice (by the sweep, as every minute): still one
	// note of it. The sweep, past the deadline, frees carol's conversation.
	for range 2 {
		res, err := rn.Lifecycle.Sweep(ctx, "b1", time.Nanosecond, 0)
		if err != nil || res.Corrupt != 1 {
			t.Fatalf("sweep: %+v %v", res, err)
		}
	}
	rn.Health.Settle(ctx, "b1")
	if inc, err = incidents.Get(ctx, "b1", inc.ID); err != nil {
		t.Fatal(err)
	}
	notes := 0
	for _, ev := range inc.Events {
		if strings.Contains(ev.What, "skipped") && strings.Contains(ev.What, bad) {
			notes++
		}
	}
	if notes != 1 {
		t.Fatalf("the incident notes the corrupt record %d times, want once: %+v", notes, inc.Events)
	}
	if msg, err := rn.Store.ConversationTask(ctx, "b1", "carol"); err != nil || msg != nil {
		t.Fatalf("carol's conversation still held: %v %v", msg, err)
	}
	if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "carol", Text: "anyone there?"}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "carol answered", func() bool { return answered("carol", "anyone there?") })
}
