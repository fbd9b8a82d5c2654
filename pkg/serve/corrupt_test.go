package serve

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

// skipsHeard is a task.Corruption that keeps the tasks skipped, by where.
type skipsHeard struct {
	mu sync.Mutex
	n  map[[2]string]int
}

func (s *skipsHeard) CorruptRecord(_, id, where string, _ error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[[2]string]int{}
	}
	s.n[[2]string{id, where}]++
}

func (s *skipsHeard) of(id, where string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[[2]string{id, where}]
}

// A spooled task whose record (written by a fallback tier while the queue
// was away) does not decode: the spool's way out drops it and reports it,
// and the tasks spooled after it are forwarded. Before, it was kept for a
// later try, for ever: the spool drains in order, so nothing after it was
// ever queued.
func TestSpoolForwardsPastACorruptRecord(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	ctx := context.Background()
	heard := &skipsHeard{}
	lc := task.NewLifecycle(env.Store, "leader", zerolog.Nop()).WithCorruption(heard)
	out := newSpoolOut(env.Store, lc, zerolog.Nop(), nil)
	spool, err := jetstream.OpenSpool(filepath.Join(t.TempDir(), "spool.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer spool.Close()
	ids := map[string]string{}
	for _, e := range []struct{ msgid, chat string }{{"m1", "alice"}, {"m2", "bob"}} {
		m := task.Message{TaskID: task.ID("b", e.msgid), Bot: "b", MsgID: e.msgid, Chat: e.chat, Question: "q", Received: time.Now()}
		raw, _ := json.Marshal(m)
		if err := spool.Append(jetstream.SpoolEntry{Bot: "b", Conversation: e.chat, MsgID: e.msgid, Payload: raw, Received: m.Received}); err != nil {
			t.Fatal(err)
		}
		ids[e.chat] = m.TaskID
	}
	if _, err := env.Store.Tasks().Put(ctx, ids["alice"], []byte("{not json")); err != nil {
		t.Fatal(err)
	}

	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := spool.Drain(dctx, out.Publish)
	if err != nil || n != 2 {
		t.Fatalf("drain: %d forwarded, %v (want both entries gone)", n, err)
	}
	if left, _ := spool.Len(); left != 0 {
		t.Fatalf("%d entries left in the spool", left)
	}
	queued := func(chat string) string {
		msg, err := env.Store.ConversationTask(ctx, "b", chat)
		if err != nil || msg == nil {
			return ""
		}
		var m task.Message
		json.Unmarshal(msg.Data, &m)
		return m.TaskID
	}
	if got := queued("bob"); got != ids["bob"] {
		t.Fatalf("bob's queue holds %q, want the task spooled after the corrupt one", got)
	}
	if got := queued("alice"); got != "" {
		t.Fatalf("alice's queue holds %q: a task no worker can start would hold her conversation", got)
	}
	if n := heard.of(ids["alice"], task.CorruptAtSpool); n != 1 {
		t.Fatalf("the corrupt record reported %d times, want 1", n)
	}
	if r, err := lc.Get(ctx, ids["alice"]); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("the corrupt value was changed: %+v %v", r, err)
	}
}

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
