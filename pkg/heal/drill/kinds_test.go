package drill

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

// simWithBot starts the simulator with bot b1 connected (so New accepts
// a drill of it) behind a recorder of the control requests posted.
func simWithBot(t *testing.T) (*wecomsim.Server, string, func(path string) []map[string]any) {
	t.Helper()
	sim := wecomsim.New(wecomsim.Config{Logger: zerolog.Nop()})
	if err := sim.AddBot("b1", "s1"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	posted := map[string][]map[string]any{}
	h := sim.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/control/") {
			raw, _ := io.ReadAll(r.Body)
			var m map[string]any
			_ = json.Unmarshal(raw, &m)
			mu.Lock()
			posted[r.URL.Path] = append(posted[r.URL.Path], m)
			mu.Unlock()
			r.Body = io.NopCloser(strings.NewReader(string(raw)))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { sim.Close(); srv.Close() })
	conn, err := wecom.Dial(context.Background(), wecom.Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/", BotID: "b1", Secret: "s1", Logger: zerolog.Nop()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sim, srv.URL, func(path string) []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return append([]map[string]any(nil), posted[path]...)
	}
}

// --wecom-history reads a gap: refused without one, with the flag named.
func TestWeComHistoryNeedsAGap(t *testing.T) {
	_, url, _ := simWithBot(t)
	for _, cfg := range []Config{
		{Bot: "b1", Kind: KindDrop, Sim: url, WeComHistory: true},
		{Bot: "b1", Kind: KindSilence, Sim: url, WeComHistory: true, Duration: time.Minute},
	} {
		if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "--wecom-history") || !strings.Contains(err.Error(), "--duration") {
			t.Errorf("%s, duration %v: %v, want a refusal naming --wecom-history and --duration", cfg.Kind, cfg.Duration, err)
		}
	}
	if _, err := New(context.Background(), Config{Bot: "b1", Kind: KindDrop, Sim: url, WeComHistory: true, Duration: 2 * time.Minute}); err != nil {
		t.Fatalf("a 2-minute gap read from WeCom's history: %v", err)
	}
}

// A WeCom-history drill authorizes the bot's msg history at the
// simulator before its traffic; a plain gap drill leaves it as it is.
func TestWeComHistoryAuthorizesTheBot(t *testing.T) {
	_, url, posted := simWithBot(t)
	ctx := context.Background()
	plain, err := New(ctx, Config{Bot: "b1", Kind: KindDrop, Sim: url, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if got := posted("/control/mcp_access"); len(got) != 0 {
		t.Fatalf("a gap drill without --wecom-history changed the authorization: %v", got)
	}
	d, err := New(ctx, Config{Bot: "b1", Kind: KindDrop, Sim: url, Duration: time.Minute, WeComHistory: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	got := posted("/control/mcp_access")
	if len(got) != 1 || got[0]["bot_id"] != "b1" || got[0]["authorized"] != true {
		t.Fatalf("POST /control/mcp_access: %v, want b1 authorized once", got)
	}
}

// What each kind expects beyond "nothing lost".
func TestExpect(t *testing.T) {
	frames := func(n int64) map[string]int64 { return map[string]int64{cmdGetMCPConfig: n} }
	route := string(incident.SignalRouteSilence)
	cases := []struct {
		name    string
		cfg     Config
		r       Round
		before  int64 // mcp config frames
		after   int64
		mention string // "": no error
	}{
		{"group silence: one resubscribe of a route silence", Config{Kind: KindGroupSilence}, Round{Signal: route, Resubscribes: 1}, 0, 0, ""},
		{"group silence seen as the bot's outage", Config{Kind: KindGroupSilence}, Round{Signal: "silence", Resubscribes: 1}, 0, 0, "route_silence"},
		{"group silence not resubscribed", Config{Kind: KindGroupSilence}, Round{Signal: route}, 0, 0, "0 resubscribes"},
		{"group silence resubscribed twice", Config{Kind: KindGroupSilence}, Round{Signal: route, Resubscribes: 2}, 0, 0, "2 resubscribes"},
		{"gap from WeCom's history", Config{Kind: KindDrop, WeComHistory: true}, Round{Filled: 3}, 1, 2, ""},
		{"gap read elsewhere", Config{Kind: KindDrop, WeComHistory: true}, Round{Filled: 3}, 1, 1, "history_url"},
		{"gap from WeCom's history, none answered late", Config{Kind: KindDrop, WeComHistory: true}, Round{NotFilled: 3}, 0, 1, "no message of the gap"},
		{"a plain gap expects no MCP", Config{Kind: KindDrop, Duration: time.Minute}, Round{Filled: 3}, 0, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := &Drill{cfg: c.cfg}
			err := d.expect(c.r, simStats{Frames: frames(c.before)}, simStats{Frames: frames(c.after)})
			switch {
			case c.mention == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.mention != "" && (err == nil || !strings.Contains(err.Error(), c.mention)):
				t.Fatalf("%v, want an error saying %q", err, c.mention)
			}
		})
	}
}

// group-silence withholds group callbacks until the next subscribe, and
// its traffic talks in the group as well as directly.
func TestGroupSilenceInjectsAndTalksInTheGroup(t *testing.T) {
	sim, url, posted := simWithBot(t)
	ctx := context.Background()
	d, err := New(ctx, Config{Bot: "b1", Kind: KindGroupSilence, Sim: url, Interval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if d.cfg.Group != DefaultGroup {
		t.Errorf("group %q by default, want %q", d.cfg.Group, DefaultGroup)
	}
	if err := d.inject(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := sim.Stats("b1")
	if err != nil || !st.GroupsSilenced || st.Silenced {
		t.Fatalf("after the injection: groups silenced %v, all silenced %v (%v); want the groups only", st.GroupsSilenced, st.Silenced, err)
	}
	if f := posted("/control/faults"); len(f) != 1 || f[0]["action"] != wecomsim.FaultGroupSilence || f[0]["seconds"] != 0.0 {
		t.Fatalf("faults posted %v, want one group_silence until the next subscribe", f)
	}

	tctx, cancel := context.WithCancel(ctx)
	tr := &traffic{d: d, round: 1, group: d.cfg.Group}
	done := make(chan struct{})
	go func() { defer close(done); tr.run(tctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for len(posted("/control/messages")) < 2*groupEvery && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if len(tr.groupSent) == 0 || len(tr.sent) == 0 {
		t.Fatalf("%d group and %d direct messages, want both", len(tr.groupSent), len(tr.sent))
	}
	all, err := sim.History(wecomsim.HistoryQuery{BotID: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	var hist []wecomsim.HistoryMessage
	for _, m := range all {
		if m.Chat == d.cfg.Group {
			hist = append(hist, m)
		}
	}
	if len(hist) != len(tr.groupSent) {
		t.Fatalf("the group's history has %d messages, want the %d sent", len(hist), len(tr.groupSent))
	}
	for _, m := range hist {
		if m.ChatType != wecom.ChatGroup || m.Delivered {
			t.Fatalf("group message %+v: want a group message withheld by the fault", m)
		}
	}
}

// The warm-up waits for the group's own baseline, and gives up after
// WarmUp saying what to change.
func TestWarmGroupWaitsForTheGroupsBaseline(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	_, url, posted := simWithBot(t)
	ctx := context.Background()
	kv := env.Store.Health()
	d, err := New(ctx, Config{Bot: "b1", Kind: KindGroupSilence, Sim: url, Health: kv, Interval: 10 * time.Millisecond, WarmUp: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.warmGroup(ctx); err == nil || !strings.Contains(err.Error(), "--warm-up") || !strings.Contains(err.Error(), "group:"+DefaultGroup) {
		t.Fatalf("no baseline: %v, want a timeout naming the group and --warm-up", err)
	}
	if n := len(posted("/control/messages")); n == 0 {
		t.Fatal("the warm-up sent no group message")
	}

	// A leader saved the group as busy: warm at once.
	b := health.Baseline{Routes: map[string]*health.RouteBaseline{}}
	rb := &health.RouteBaseline{}
	rb.Observe(time.Now(), time.Local, 10*time.Minute, 600)
	b.Routes[wecom.RouteGroupPrefix+DefaultGroup] = rb
	raw, _ := json.Marshal(&b)
	if _, err := kv.Put(ctx, "baseline."+jetstream.EncodeToken("b1"), raw); err != nil {
		t.Fatal(err)
	}
	d.cfg.WarmUp = time.Minute
	if err := d.warmGroup(ctx); err != nil {
		t.Fatalf("a busy group's baseline: %v", err)
	}
}
