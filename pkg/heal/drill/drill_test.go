package drill

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

// TestNewRefusesWhatIsNotTheSimulator: a drill injects faults, so it
// starts only against `botctl sim`, and every refusal says what to give.
func TestNewRefusesWhatIsNotTheSimulator(t *testing.T) {
	sim := wecomsim.New(wecomsim.Config{Logger: zerolog.Nop()})
	if err := sim.AddBot("b1", "s1"); err != nil {
		t.Fatal(err)
	}
	simSrv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { sim.Close(); simSrv.Close() })
	// Something that answers HTTP but is not the simulator.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(other.Close)
	nodes := func(context.Context) ([]node.Info, error) { return nil, nil }

	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		cfg     Config
		notSim  bool   // want ErrNotSimulator
		mention string // the error names this
	}{
		{"unknown kind", Config{Bot: "b1", Kind: "flood", Sim: simSrv.URL}, false, "kill-leader"},
		{"no bot", Config{Kind: KindDrop, Sim: simSrv.URL}, false, "--bot"},
		{"kill-leader without etcd", Config{Bot: "b1", Kind: KindKillLeader, Sim: simSrv.URL}, false, "etcd"},
		{"a WebSocket URL", Config{Bot: "b1", Kind: KindDrop, Sim: "ws://127.0.0.1:8390/"}, true, "control API"},
		{"WeCom itself", Config{Bot: "b1", Kind: KindDrop, Sim: "https://openws.work.weixin.qq.com"}, true, "WeCom itself"},
		{"WeCom, upper case", Config{Bot: "b1", Kind: KindDrop, Sim: "https://QYAPI.WEIXIN.QQ.COM"}, true, "WeCom itself"},
		{"not a simulator", Config{Bot: "b1", Kind: KindDrop, Sim: other.URL}, true, "GET /control/stats"},
		{"a bot the simulator lacks", Config{Bot: "b9", Kind: KindDrop, Sim: simSrv.URL}, true, "b9"},
		// No node of b1 connects here: they use another WeCom URL.
		{"a bot never connected here", Config{Bot: "b1", Kind: KindDrop, Sim: simSrv.URL, ConnectWait: time.Second}, true, "never connected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(ctx, tc.cfg)
			if err == nil {
				t.Fatal("New accepted it")
			}
			if got := errors.Is(err, ErrNotSimulator); got != tc.notSim {
				t.Errorf("errors.Is(err, ErrNotSimulator) = %v, want %v (%v)", got, tc.notSim, err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}

	// A host that merely ends in "qq.com" is not WeCom: it is asked, and
	// refused only for not answering as the simulator.
	if _, err := New(ctx, Config{Bot: "b1", Kind: KindDrop, Sim: "http://notqq.com:1", Client: &http.Client{Timeout: 3 * time.Second}}); err == nil || strings.Contains(err.Error(), "WeCom itself") {
		t.Errorf("notqq.com: %v", err)
	}

	// Once b1 is connected to the simulator, a drill of it is accepted.
	conn, err := wecom.Dial(ctx, wecom.Config{URL: "ws" + strings.TrimPrefix(simSrv.URL, "http") + "/", BotID: "b1", Secret: "s1", Logger: zerolog.Nop()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	for _, kind := range Kinds {
		cfg := Config{Bot: "b1", Kind: kind, Sim: simSrv.URL}
		if kind == KindKillLeader {
			cfg.Nodes = nodes
		}
		d, err := New(ctx, cfg)
		if err != nil {
			t.Fatalf("%s against the simulator: %v", kind, err)
		}
		switch kind {
		case KindSilence:
			if d.cfg.Duration != 30*time.Second {
				t.Errorf("silence lasts %v by default, want 30s", d.cfg.Duration)
			}
		case KindStall:
			if d.cfg.Duration != 20*time.Second {
				t.Errorf("stall lasts %v by default, want 20s", d.cfg.Duration)
			}
		case KindDrop:
			if d.cfg.Duration != 0 {
				t.Errorf("a plain drop has Duration %v, want 0 (a Duration makes it a gap)", d.cfg.Duration)
			}
		}
	}
}

// TestSummarize: times are over the rounds that completed; sent, lost and
// alerts over all of them.
func TestSummarize(t *testing.T) {
	rounds := []Round{
		{N: 1, T1: 1, T2: 0.01, T2Auto: 0.01, T2Human: -1, T3: 3, Sent: 6, Alerts: 2},
		{N: 2, T1: 3, T2: 0.03, T2Auto: -1, T2Human: 12, T3: 5, Sent: 6, Lost: 1, Alerts: 2},
		{N: 3, T1: 100, T2: 100, T2Auto: 100, T2Human: 100, T3: 100, Sent: 4, Lost: 4, Error: "round timed out"},
	}
	s := Summarize(rounds)
	if s.Rounds != 3 || s.Failed != 1 || s.Sent != 16 || s.Lost != 5 || s.Alerts != 4 {
		t.Errorf("counts: %+v", s)
	}
	if s.T1.N != 2 || s.T1.Max != 3 || s.T3.Max != 5 {
		t.Errorf("times include the failed round or miss one: T1 %+v T3 %+v", s.T1, s.T3)
	}
	// T2 split: round 1 acted on by botctl, round 2 by a person.
	if s.T2Auto.N != 1 || s.T2Auto.Max != 0.01 || s.T2Human.N != 1 || s.T2Human.Max != 12 {
		t.Errorf("T2 split: auto %+v, human %+v; want round 1's 0.01s and round 2's 12s", s.T2Auto, s.T2Human)
	}
	if z := Summarize(nil); z.Rounds != 0 || z.T1.N != 0 {
		t.Errorf("no rounds: %+v", z)
	}
}
