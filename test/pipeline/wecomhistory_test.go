package pipeline

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

// gapRig is a cluster whose simulator runs on a clock of its own, behind
// the nodes' by offset, so that a gap of minutes in WeCom's times (the
// messages' create times, hence the inbound watermark and the history's
// send times) is played in seconds: the clock is set back before the
// gap and brought to the nodes' time when it ends.
type gapRig struct {
	*cluster
	offset atomic.Int64 // the simulator's clock less the nodes', ns
}

func newGapRig(t *testing.T) *gapRig {
	t.Helper()
	r := &gapRig{cluster: newCluster(t)}
	sim := wecomsim.New(wecomsim.Config{Logger: zerolog.Nop(), Now: func() time.Time { return time.Now().Add(time.Duration(r.offset.Load())) }})
	sim.AddBot("b1", "s1")
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { sim.Close(); srv.Close() })
	r.sim, r.wsURL = sim, "ws"+strings.TrimPrefix(srv.URL, "http")+"/"
	return r
}

// simAt sets the simulator's clock to the nodes' plus d.
func (r *gapRig) simAt(d time.Duration) { r.offset.Store(int64(d)) }

// gapConfig is a node without backfill.history_url (WeCom's own history
// is the gap backfill's source), whose outages of a second or more page.
func gapConfig(cfg *config.Config) {
	cfg.Backfill.HistoryURL = ""
	cfg.Recovery.Threshold = time.Second
	cfg.Recovery.Probes, cfg.Recovery.ProbeInterval, cfg.Recovery.Observe = 1, 100*time.Millisecond, time.Second
}

// playGap answers a message before the gap, then plays a 2-minute gap in
// the simulator's time: the connection dropped and refused for 2
// minutes, three users (one in a group) asking meanwhile. It returns the
// node and the gap's questions, with the connection back.
func (r *gapRig) playGap(t *testing.T) (*runningNode, []string) {
	t.Helper()
	r.simAt(-150 * time.Second)
	a := r.start("a", gapConfig)
	testwait.Eventually(t, waitLong, "a connected", r.connected)
	r.post("alice", "asked before the gap")
	testwait.Eventually(t, waitLong, "answered", func() bool { return answered(r.bot("alice"), "asked before the gap") == 1 })
	testwait.Eventually(t, waitLong, "inbound watermark written", func() bool {
		wm, err := backfill.LoadWatermark(context.Background(), a.node.Store, "b1")
		return err == nil && !wm.Created.IsZero()
	})
	// The gap: 2 minutes from the drop, in the simulator's time.
	if err := r.sim.Fault(wecomsim.FaultRequest{BotID: "b1", Action: wecomsim.FaultRefuseSubscribe, Seconds: 120}); err != nil {
		t.Fatal(err)
	}
	if err := r.sim.Fault(wecomsim.FaultRequest{BotID: "b1", Action: wecomsim.FaultDrop}); err != nil {
		t.Fatal(err)
	}
	dropped := time.Now()
	testwait.Eventually(t, waitLong, "disconnected", func() bool { return !r.connected() })
	var qs []string
	for i, req := range []wecomsim.MessageRequest{
		{UserID: "u0"},
		{UserID: "u1"},
		{UserID: "u2", ChatType: "group", ChatID: "g1"},
	} {
		r.simAt(time.Duration(-120+40*i) * time.Second)
		req.BotID, req.Text = "b1", fmt.Sprintf("asked in the gap %d", i)
		m, err := r.sim.PostMessage(req)
		if err != nil {
			t.Fatal(err)
		}
		if m.Delivered {
			t.Fatalf("delivered with no connection: %+v", m)
		}
		qs = append(qs, req.Text)
	}
	// In the nodes' time the gap must outlast recovery.threshold (1 s)
	// for its page: the node is refused at least once meanwhile.
	testwait.Eventually(t, waitLong, "a subscribe refused, and the gap past recovery.threshold", func() bool {
		st, _ := r.sim.Stats("b1")
		return st.SubscribeRefusals > 0 && time.Since(dropped) > 1500*time.Millisecond
	})
	r.simAt(0) // 150 s after the drop: subscribes are taken again
	testwait.Eventually(t, waitLong, "a connected again", r.connected)
	return a, qs
}

// Without backfill.history_url, where the bot's msg capability is
// authorized, the messages of a 2-minute gap are read from WeCom's own
// history (the msg MCP server the connection names) and answered late,
// once each; the message answered before the gap, inside the pass's
// overlap, is known by its history id and not answered again.
func TestGapBackfilledFromWeComHistory(t *testing.T) {
	t.Parallel()
	r := newGapRig(t)
	if err := r.sim.SetMCPAccess(wecomsim.MCPAccess{BotID: "b1", Authorized: true}); err != nil {
		t.Fatal(err)
	}
	a, qs := r.playGap(t)
	chats := []string{"u0", "u1", "g1"}
	for i, q := range qs {
		deadline := time.Now().Add(2 * waitLong)
		for answeredLate(r.bot(chats[i]), q) != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("%q never answered late: %s sees %+v; access %+v", q, chats[i], r.bot(chats[i]), a.node.Access.Stats())
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
	time.Sleep(2 * time.Second) // a second answer would come in this time
	for i, q := range qs {
		if n := answeredLate(r.bot(chats[i]), q); n != 1 {
			t.Fatalf("%q answered late %d times", q, n)
		}
	}
	if n, late := answered(r.bot("alice"), "asked before the gap"), answeredLate(r.bot("alice"), "asked before the gap"); n != 1 || late != 0 {
		t.Fatalf("the message answered before the gap was answered %d times, and %d times late", n, late)
	}
	if st, _ := r.sim.Stats("b1"); st.Frames[wecomsim.CmdGetMCPConfig] == 0 {
		t.Fatalf("the node never asked for the msg server over its connection: %+v", st.Frames)
	}
}

// Where the bot's msg capability is not authorized, the gap is marked and
// paged as without a history source, and the outage's incident says why.
func TestGapNotAuthorizedMarkedAndPaged(t *testing.T) {
	t.Parallel()
	r := newGapRig(t)
	a, _ := r.playGap(t)
	incs := incident.NewStore(a.node.Store.Incidents())
	var outage, data incident.Incident
	var all []incident.Incident
	defer func() {
		if t.Failed() {
			for _, i := range all {
				t.Logf("incident %s kind %s level %v reason %q next %q backfill %+v events %+v", i.ID, i.Kind, i.Level, i.Reason, i.Next, i.Backfill, i.Events)
			}
		}
	}()
	testwait.Eventually(t, 2*waitLong, "the outage's incident telling the backfill's reason, and a data incident", func() bool {
		var err error
		all, err = incs.List(context.Background(), incident.Filter{Bot: "b1"})
		if err != nil {
			return false
		}
		outage, data = incident.Incident{}, incident.Incident{}
		for _, i := range all {
			switch {
			case i.Kind == incident.Data:
				data = i
			case i.Backfill.Note != "":
				outage = i
			}
		}
		return outage.ID != "" && data.ID != ""
	})
	if outage.Backfill.Ran || !strings.Contains(outage.Backfill.Note, "not authorized") {
		t.Fatalf("the outage's incident does not say the history is not authorized: %+v", outage.Backfill)
	}
	if data.Level != incident.Human || !strings.Contains(data.Next, "not authorized") || !strings.Contains(data.Reason, "not authorized") {
		t.Fatalf("data incident: level %v, reason %q, next %q", data.Level, data.Reason, data.Next)
	}
	for i := range 3 {
		if n := answeredLate(r.bot([]string{"u0", "u1", "g1"}[i]), fmt.Sprintf("asked in the gap %d", i)); n != 0 {
			t.Fatalf("answered late %d times without the history", n)
		}
	}
}
