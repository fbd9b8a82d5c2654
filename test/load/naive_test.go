package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

// naiveWindowScale is the tests' minute: the simulator's quota window
// (WeCom's 30 frames a minute per conversation become 30 per 6 s), and
// the naive bot's tick scaled with it, so that an answer of a few seconds
// meets the quota as a minute's answer would.
const naiveWindowScale = 6 * time.Second

// naiveRun starts the simulator (recording; simCfg's quota) and the naive
// bot's handler on a connection to it (answers of answer, progress every
// tick), asks n conversations one question each, as the ramp does, and
// waits until every one has its whole answer on a final frame, as the
// ramp judges it (the recorder's frame with finish and the answer's
// hash). It returns the simulator and each conversation's count of
// complete final frames.
func naiveRun(t *testing.T, simCfg wecomsim.Config, n int, answer, tick time.Duration) (*wecomsim.Server, map[string]int) {
	t.Helper()
	simCfg.Record, simCfg.Logger = true, zerolog.Nop()
	sim := wecomsim.New(simCfg)
	sim.AddBot(rampBot, "s")
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { sim.Close(); srv.Close() })

	nb, err := newNaiveBot(answer, tick)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := wecom.Dial(ctx, wecom.Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/", BotID: rampBot, Secret: "s", Logger: zerolog.Nop()}, nb.handler(ctx))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); conn.Close(); <-conn.Done(); nb.wait() })

	prefix := "nv"
	expected := map[string]string{} // chat → its whole answer's hash
	for i := range n {
		chat := fmt.Sprintf("%s-%d", prefix, i)
		expected[chat] = task.Hash(ai.DemoAnswer(question(prefix, i), 3, 0))
		if _, err := sim.PostMessage(wecomsim.MessageRequest{BotID: rampBot, UserID: chat, Text: question(prefix, i)}); err != nil {
			t.Fatal(err)
		}
	}
	full := map[string]int{}
	collect := func() {
		for _, e := range sim.DrainRecorded(rampBot) {
			if e.Kind == wecomsim.RecordFrame && e.Finish && e.ContentHash == expected[e.Chat] {
				full[e.Chat]++
			}
		}
	}
	// Generous: the answers take seconds; a final refused for the quota
	// waits for the scaled window, and a loaded machine is slow.
	deadline := time.Now().Add(2 * time.Minute)
	for len(full) < n && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		collect()
	}
	if len(full) < n {
		st, _ := sim.Stats(rampBot)
		t.Fatalf("%d/%d conversations got their whole answer on a final frame (quota rejections %d, expired %d, errors %v)",
			len(full), n, st.QuotaRejections, st.ExpiredUpdates, st.Errors)
	}
	// Every answer's goroutine ends with its final frame: once they have,
	// a second final frame would have been recorded.
	ended := make(chan struct{})
	go func() { nb.wait(); close(ended) }()
	testwait.Eventually(t, 30*time.Second, "the naive bot's answers to end", func() bool {
		select {
		case <-ended:
			return true
		default:
			return false
		}
	})
	collect()
	return sim, full
}

// TestNaiveBotStaysUnderQuota: at its default pace (botctl's progress gap,
// scaled to the test's minute), the naive bot answers 20 conversations,
// each whole and once, and WeCom refuses none of its frames. With the old
// tick (1 s, scaled: 100 ms, 60 frames a window) it fails: WeCom refuses
// progress frames, and without the final's retry every answer is lost.
func TestNaiveBotStaysUnderQuota(t *testing.T) {
	tick := time.Duration(float64(naiveTick) * float64(naiveWindowScale) / float64(time.Minute))
	sim, full := naiveRun(t, wecomsim.Config{RateWindow: naiveWindowScale}, 20, 4*time.Second, tick)
	for chat, k := range full {
		if k != 1 {
			t.Errorf("%s: %d final frames with the whole answer, want 1", chat, k)
		}
	}
	st, err := sim.Stats(rampBot)
	if err != nil {
		t.Fatal(err)
	}
	if st.QuotaRejections != 0 || st.ExpiredUpdates != 0 || st.FinishedStreamFrames != 0 {
		t.Errorf("quota rejections %d, expired %d, frames after finish %d, want none (errors by errcode %v)",
			st.QuotaRejections, st.ExpiredUpdates, st.FinishedStreamFrames, st.Errors)
	}
}

// TestNaiveFinalOutlastsQuota: with a tick far faster than the quota
// allows (5 frames a window, a tick of 100 ms), WeCom refuses most
// progress frames and the final frame, which the naive bot sends again
// until it is accepted: every answer arrives whole, once. Without the
// retry every answer is lost.
func TestNaiveFinalOutlastsQuota(t *testing.T) {
	sim, full := naiveRun(t, wecomsim.Config{RateLimit: 5, RateWindow: naiveWindowScale}, 5, 3*time.Second, 100*time.Millisecond)
	for chat, k := range full {
		if k != 1 {
			t.Errorf("%s: %d final frames with the whole answer, want 1", chat, k)
		}
	}
	st, err := sim.Stats(rampBot)
	if err != nil {
		t.Fatal(err)
	}
	// The test is about refused frames: without any, it tested nothing.
	if st.QuotaRejections == 0 {
		t.Errorf("no frame refused for the quota (frames %v): the test did not reach the quota", st.Frames)
	}
	if st.ExpiredUpdates != 0 || st.FinishedStreamFrames != 0 {
		t.Errorf("expired %d, frames after finish %d, want none", st.ExpiredUpdates, st.FinishedStreamFrames)
	}
}
