package serve

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// The node's metrics show each bot's breakers and fallbacks: a primary
// refusing connections, failed once with ai.breaker.failures 1, is open
// (2) and the answer fell back to the next backend.
func TestBreakerMetrics(t *testing.T) {
	b := &bots{breakerWatch: &breakerWatch{log: zerolog.Nop()}}
	b.breakers = ai.NewBreakers(b.breakerWatch, nil)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	backend, err := ai.New(ai.Config{Kind: ai.KindHTTP, HTTP: ai.HTTPConfig{URL: dead.URL + "/answer"},
		Breaker:  ai.BreakerConfig{Failures: 1, Cooldown: time.Hour},
		Fallback: []ai.BackendConfig{{Kind: ai.KindDemo, Demo: ai.DemoConfig{AnswerTime: time.Millisecond}}}}, ai.WithBreakers(b.breakers))
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
