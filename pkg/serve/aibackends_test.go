package serve

import (
	"context"
	"github.com/botctl/botctl/pkg/bots"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// The node's metrics show each bot's breakers and fallbacks: a primary
// refusing connections, failed once with ai.breaker.failures 1, is open
// (2) and the answer fell back to the next backend.
func TestBreakerMetrics(t *testing.T) {
	t.Parallel()
	b, err := bots.New(context.Background(), config.Defaults(), nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	backend, err := ai.New(ai.Config{Kind: ai.KindHTTP, HTTP: ai.HTTPConfig{URL: dead.URL + "/answer"},
		Breaker:  ai.BreakerConfig{Failures: 1, Cooldown: time.Hour},
		Fallback: []ai.BackendConfig{{Kind: ai.KindDemo, Demo: ai.DemoConfig{AnswerTime: time.Millisecond}}}}, ai.WithBreakers(b.Breakers()))
	if err != nil {
		t.Fatal(err)
	}
	req := ai.Request{Bot: "b1", Messages: []ai.Message{{Role: ai.RoleUser, Content: "q"}}}
	if err := backend.Stream(context.Background(), req, func(string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(breakerCollector{b})
	primary := "http:" + strings.TrimPrefix(dead.URL, "http://")
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for k, v := range map[string]float64{
		"botctl_ai_breaker_state{backend=demo,bot=b1}":                   0,
		"botctl_ai_breaker_state{backend=" + primary + ",bot=b1}":        2,
		"botctl_ai_fallbacks_total{bot=b1,from=" + primary + ",to=demo}": 1,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v; have %v", k, g, ok, v, got)
		}
	}
	empty := prometheus.NewRegistry() // bots not built yet: nothing, no panic
	empty.MustRegister(breakerCollector{nil})
	if mfs, err := empty.Gather(); err != nil || len(mfs) != 0 {
		t.Errorf("no bots: %v, %v", mfs, err)
	}
}

// Through a real node: b1's primary refuses connections and its fallback
// answers (the user gets the fallback's answer, the metrics show the
// fallback and the open breaker); b2's only backend refuses them too, so
// with ai.breaker.failures 1 every backend of b2 is down after one
// question: its user is told the answer failed and b2's AI incident opens.
func TestNodeFallsBackAndOpensTheAIIncident(t *testing.T) {
	t.Parallel()
	sim, wecomURL := startSimBots(t, "b1", "b2")
	e, ns := startEtcd(t), startNATS(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	primary := "http:" + strings.TrimPrefix(dead.URL, "http://")
	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.AI.Kind, cfg.AI.HTTP = config.AIKindHTTP, config.AIHTTP{URL: dead.URL + "/answer"}
	cfg.AI.Breaker = config.AIBreaker{Failures: 1, Cooldown: time.Hour}
	cfg.Bots = []config.Bot{
		{ID: "b1", Secret: "s-b1", Settings: settings(t, "ai: {fallback: [{kind: demo, demo: {answer_time: 300ms}}]}")},
		{ID: "b2", Secret: "s-b2"},
	}
	rn, err := startNode(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"b1", "b2"} {
		testwait.Eventually(t, time.Minute, b+" connected", func() bool { st, _ := sim.Stats(b); return st.Connected })
		if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: b, UserID: "ann", Text: "how do tides work"}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, time.Minute, "b1 answered", func() bool { return lastFinished(sim, "b1", "ann") != "" })
	if got, want := lastFinished(sim, "b1", "ann"), ai.DemoAnswer("how do tides work", 3, 0); got != want {
		t.Errorf("b1 answered %q, want the fallback's %q", got, want)
	}
	testwait.Eventually(t, time.Minute, "b2's user told", func() bool { return lastFinished(sim, "b2", "ann") != "" })
	incs := incident.NewStore(rn.Store.Incidents())
	var inc *incident.Incident
	testwait.Eventually(t, time.Minute, "b2's AI incident", func() bool {
		inc, _ = incs.OpenFor(context.Background(), "b2", incident.AI)
		return inc != nil
	})
	if inc.Signal != incident.SignalAIDown || !strings.Contains(inc.Reason, primary) {
		t.Errorf("incident %+v", inc)
	}
	if i, _ := incs.OpenFor(context.Background(), "b1", incident.AI); i != nil {
		t.Errorf("b1 has a working fallback, yet an AI incident: %+v", i)
	}
	m := rn.scrape(t)
	for _, want := range []string{
		`botctl_ai_fallbacks_total{bot="b1",from="` + primary + `",to="demo"} 1`,
		`botctl_ai_breaker_state{backend="` + primary + `",bot="b1"} 2`,
		`botctl_ai_breaker_state{backend="` + primary + `",bot="b2"} 2`,
		`botctl_incidents_open{bot="b2",kind="ai"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
