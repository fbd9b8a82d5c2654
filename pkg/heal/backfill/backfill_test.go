package backfill_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The watermark only moves forward, and never while the spool holds a
// task (a spooled message is not durable in the cluster yet).
func TestTrackerForwardOnlyAndHeldBySpool(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	var holding atomic.Bool
	holding.Store(true)
	tr := &backfill.Tracker{Store: env.Store, Node: "n1", Spool: spoolOf{&holding}, Logger: zerolog.Nop()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tr.Run(ctx, 20*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	t0 := time.Unix(1700000000, 0).UTC()
	tr.Handled("b1", t0)
	time.Sleep(200 * time.Millisecond) // several flush rounds, all held
	if wm, _ := backfill.LoadWatermark(context.Background(), env.Store, "b1"); !wm.Created.IsZero() {
		t.Fatalf("watermark written while the spool held a task: %+v", wm)
	}
	holding.Store(false)
	testwait.Eventually(t, 30*time.Second, "the watermark", func() bool {
		wm, _ := backfill.LoadWatermark(context.Background(), env.Store, "b1")
		return wm.Created.Equal(t0)
	})
	tr.Handled("b1", t0.Add(-time.Hour)) // an older message handled late
	tr.Handled("b1", t0.Add(time.Second))
	testwait.Eventually(t, 30*time.Second, "the watermark", func() bool {
		wm, _ := backfill.LoadWatermark(context.Background(), env.Store, "b1")
		return wm.Created.Equal(t0.Add(time.Second))
	})
}

// spoolOf is a spool that holds one task while held is true.
type spoolOf struct{ held *atomic.Bool }

func (s spoolOf) Len() (int, error) {
	if s.held.Load() {
		return 1, nil
	}
	return 0, nil
}

// simHistory is a simulator serving bot b1 over HTTP (closed at the
// test's end), and the history source that reads it.
func simHistory(t *testing.T) (*wecomsim.Server, *backfill.SimHistory) {
	t.Helper()
	sim := wecomsim.New(wecomsim.Config{Logger: zerolog.Nop()})
	sim.AddBot("b1", "s1")
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { sim.Close(); srv.Close() })
	src, err := backfill.SimHistoryFor("ws" + strings.TrimPrefix(srv.URL, "http") + "/")
	if err != nil {
		t.Fatal(err)
	}
	return sim, src
}

// inbound is an inbound path that knows the msgids of known and collects
// what is handed over late.
type inbound struct {
	known map[string]bool
	late  []string
}

func (in *inbound) Known(_ context.Context, _, msgid string) (bool, error) {
	return in.known[msgid], nil
}

func (in *inbound) Late(_ context.Context, _ string, m backfill.Message) error {
	in.late = append(in.late, m.Text)
	return nil
}

// A pass reads the simulator's history from the watermark less the
// overlap, skips what is known, hands over the rest, and stops at its
// budget, counting what it did not fill.
func TestRunAgainstSimulatorHistory(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	sim, src := simHistory(t)
	var ids []string
	for _, u := range []string{"u1", "u2", "u3", "u4"} {
		r, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: u, Text: "hi " + u})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.MsgID)
	}
	in := &inbound{known: map[string]bool{ids[0]: true}}
	cfg := backfill.Config{Store: env.Store, Source: src, MaxMessages: 2, Logger: zerolog.Nop(), Inbound: in}
	until := time.Now()
	since, err := backfill.Since(context.Background(), cfg, "b1", until)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := backfill.Run(context.Background(), cfg, "b1", since, until)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Read != 4 || rep.Known != 1 || rep.Filled != 2 || rep.NotFilled != 1 {
		t.Fatalf("report = %+v", rep)
	}
	if late := in.late; len(late) != 2 || late[0] != "hi u2" || late[1] != "hi u3" {
		t.Fatalf("handed over %q", late)
	}
	if len(rep.Unfilled) != 1 || rep.Unfilled[0] != "u4" {
		t.Fatalf("unfilled conversations %q, want u4", rep.Unfilled)
	}

	// The rate bounds the hand-over: 3 messages at 4/s take at least
	// half a second (the first goes at once). Load only makes it slower.
	in.late = nil
	cfg.MaxMessages, cfg.Rate = 10, 4
	t0 := time.Now()
	if rep, err = backfill.Run(context.Background(), cfg, "b1", since, until); err != nil || rep.Filled != 3 {
		t.Fatalf("second pass: %+v %v", rep, err)
	}
	if took := time.Since(t0); took < 450*time.Millisecond {
		t.Fatalf("3 messages at 4/s handed over in %s", took)
	}
	if _, err := backfill.SimHistoryFor("http://not-ws"); err == nil {
		t.Fatal("a non-ws URL accepted")
	}
}

// A message known only under the id WeCom's own history gives it (filled
// from that history earlier, or answered live) is known to a pass over
// another source that gives it under its callback msgid: not handed over
// again.
func TestRunKnowsAMessageByItsHistoryID(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	sim, src := simHistory(t)
	for _, req := range []wecomsim.MessageRequest{
		{BotID: "b1", UserID: "u1", Text: "answered from WeCom's history"},
		{BotID: "b1", UserID: "u2", ChatType: "group", ChatID: "g1", Text: "answered live in a group"},
		{BotID: "b1", UserID: "u3", Text: "never answered"},
	} {
		if _, err := sim.PostMessage(req); err != nil {
			t.Fatal(err)
		}
	}
	until := time.Now().Add(time.Second)
	msgs, err := src.History(context.Background(), "b1", until.Add(-time.Minute), until)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("history: %d messages, %v", len(msgs), err)
	}
	in := &inbound{known: map[string]bool{}}
	for _, m := range msgs[:2] {
		id := backfill.HistoryMsgID("b1", m.ChatType, m.Chat, m.UserID, m.Created, "text", m.Text)
		if id == m.MsgID || m.HistoryID("b1") != id {
			t.Fatalf("history id of %+v: %q, want %q (not its msgid)", m, m.HistoryID("b1"), id)
		}
		in.known[id] = true
	}
	cfg := backfill.Config{Store: env.Store, Source: src, Logger: zerolog.Nop(), Inbound: in}
	rep, err := backfill.Run(context.Background(), cfg, "b1", until.Add(-time.Minute), until)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Known != 2 || rep.Filled != 1 || len(in.late) != 1 || in.late[0] != "never answered" {
		t.Fatalf("report %+v, handed over %q", rep, in.late)
	}
	if id := (backfill.Message{MsgID: "wecomhist-x", Text: "t", Created: until}).HistoryID("b1"); id != "wecomhist-x" {
		t.Fatalf("a message read from WeCom's history keeps its id: %q", id)
	}
	if id := (backfill.Message{MsgID: "m", UserID: "u"}).HistoryID("b1"); id != "" {
		t.Fatalf("a message without text has a history id: %q", id)
	}
}

// A history source that answers with more than the reader's bound fails
// the read with ErrHistoryTooLarge, naming the bot and the bound, instead
// of taking the whole body (64 MiB here) into memory.
func TestHistoryReadIsBounded(t *testing.T) {
	const limit = 64 << 10
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A valid start, then a text that never ends: 64 MiB at most.
		io.WriteString(w, `{"messages":[{"msgid":"m1","chat":"u1","text":"`)
		chunk := []byte(strings.Repeat("x", 32<<10))
		for range 2048 {
			if _, err := w.Write(chunk); err != nil {
				return // the reader hung up
			}
		}
	}))
	defer srv.Close()
	src := &backfill.SimHistory{Base: srv.URL, MaxBytes: limit}
	_, err := src.History(context.Background(), "b1", time.Now().Add(-time.Minute), time.Now())
	if !errors.Is(err, backfill.ErrHistoryTooLarge) || !strings.Contains(err.Error(), "65536 bytes") || !strings.Contains(err.Error(), "bot b1") {
		t.Fatalf("oversized history: err %v, want ErrHistoryTooLarge naming the bot and the bound", err)
	}
	srv.CloseClientConnections()

	// The default bound applies when none is set; a body within it reads.
	small := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"messages":[{"msgid":"m1","chat":"u1","text":"hi","create_time":1700000000}]}`)
	}))
	defer small.Close()
	msgs, err := (&backfill.SimHistory{Base: small.URL}).History(context.Background(), "b1", time.Now().Add(-time.Minute), time.Now())
	if err != nil || len(msgs) != 1 || msgs[0].Text != "hi" {
		t.Fatalf("history within the bound: %+v %v", msgs, err)
	}
}
