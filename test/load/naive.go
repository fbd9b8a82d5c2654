package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
)

// naiveTick is the naive bot's default -tick and the ramp's -naive-tick:
// botctl's own progress gap at its default push.budget (20 frames a
// minute per conversation: a minute over the budget less the two frames
// kept for the final and the window's close, 3.33 s). At it a
// conversation's progress, receipt and final stay under WeCom's 30 frames
// a minute, as botctl's do.
var naiveTick = pusher.ProgressGap(config.Defaults().Push.Budget)

// naiveWindow is WeCom's stream window, counted from the stream's first
// frame (botctl's push.stream_window default, 6 minutes): no frame of a
// stream is accepted after it.
var naiveWindow = config.Defaults().Push.StreamWindow

// naiveMargin: a stream whose answer still runs is closed this long
// before its window ends (the pusher's default Margin, 30 s).
const naiveMargin = 30 * time.Second

// naiveRetry is how long the final frame waits before it is sent again
// after WeCom refused it for the conversation's quota (45009): a frame
// accepted earlier leaves the minute's window by then, or by a later try.
const naiveRetry = time.Second

// naiveMain is the baseline the ramp puts beside botctl: a single-process
// bot written the way a careful single-process bot is. It holds the WeCom
// connection itself (pkg/wecom, the same client botctl uses) and answers
// each message in a goroutine of its own: the receipt at once, the answer
// streamed from the same AI backend botctl's workers use (the demo
// backend, ai.New, its deltas every 50 ms, as a model's tokens arrive),
// and every tick the answer so far if it changed, the whole answer with
// finish once the stream ends. It does the WeCom work botctl does, under
// the same quota: the tick is botctl's progress gap (naiveTick), a
// progress frame WeCom refuses is skipped, and a final frame refused for
// the quota (45009) is sent again every naiveRetry until it is accepted
// or the stream's window is over; an answer still running when the
// window closes (less naiveMargin) ends the stream with what has come
// (botctl would push the rest; this bot has nothing to push it with). The
// answer text is the demo backend's (ai.DemoAnswer), so the simulator's
// recorder matches it as it matches botctl's. Until issue 28 it computed
// the text at each tick instead of streaming it: botctl alone paid for
// the backend's stream, which is not high availability's cost (about a
// third of its workers' CPU); and until the ramp of bench/ramp-cost.md it
// ticked every second with no regard for the quota, so that WeCom refused
// half its frames and many of its answers. No etcd, no NATS, no record of
// anything: nothing survives the process, no other node can take over,
// and each answer's own ticker paces its conversation (one question at a
// time per conversation, as the ramp asks).
func naiveMain(args []string) error {
	fs := flag.NewFlagSet("naive", flag.ExitOnError)
	url := fs.String("wecom", "", "WeCom (simulator) WebSocket URL")
	bot := fs.String("bot", rampBot, "bot id")
	secret := fs.String("secret", "", "bot secret")
	answer := fs.Duration("answer", 60*time.Second, "how long an answer streams")
	tick := fs.Duration("tick", naiveTick, "least time between two progress frames of a conversation (default botctl's progress gap at its default push.budget)")
	prof := fs.Bool("pprof", false, "serve Go's profiler on a loopback port (printed: \"pprof: URL\")")
	fs.Parse(args)
	if *prof {
		if err := servePprof(); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	nb, err := newNaiveBot(*answer, *tick)
	if err != nil {
		return err
	}
	defer nb.wait()
	conn, err := wecom.Dial(ctx, wecom.Config{URL: *url, BotID: *bot, Secret: *secret, Logger: zerolog.Nop()}, nb.handler(ctx))
	if err != nil {
		return err
	}
	fmt.Println("naive ready")
	select {
	case <-ctx.Done():
		conn.Close()
	case <-conn.Done():
	}
	<-conn.Done()
	return nil
}

// naiveBot is the naive bot's answering, apart from its process: a test
// runs it on a connection of its own.
type naiveBot struct {
	backend ai.Backend
	receipt string
	tick    time.Duration // least time between two progress frames of an answer
	window  time.Duration // the stream's window, from its first frame
	margin  time.Duration // an answer still running is closed this long before the window ends
	retry   time.Duration // the wait before a final frame refused for the quota is sent again
	wg      sync.WaitGroup
}

// newNaiveBot answers with the demo backend in answer time, sending
// progress at most every tick.
func newNaiveBot(answer, tick time.Duration) (*naiveBot, error) {
	if tick <= 0 {
		return nil, fmt.Errorf("naive: -tick %s: want a positive duration (default %s, botctl's progress gap)", tick, naiveTick)
	}
	backend, err := ai.New(ai.Config{Kind: ai.KindDemo, Demo: ai.DemoConfig{AnswerTime: answer}})
	if err != nil {
		return nil, err
	}
	return &naiveBot{backend: backend, receipt: "已收到，正在处理…", // botctl's default receipt (pkg/access)
		tick: tick, window: naiveWindow, margin: naiveMargin, retry: naiveRetry}, nil
}

// handler answers every text message in a goroutine of its own until ctx
// ends; wait waits for them.
func (b *naiveBot) handler(ctx context.Context) wecom.Handler {
	return wecom.MessageFunc(func(c *wecom.Conn, reqID string, m *wecom.MsgCallback) {
		if m.Text == nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.answer(ctx, c, reqID, m.Text.Content)
		}()
	})
}

func (b *naiveBot) wait() { b.wg.Wait() }

// answer is one conversation's goroutine and ticker: the backend streams
// into text, the ticker sends what has come, the final frame the whole.
func (b *naiveBot) answer(ctx context.Context, c *wecom.Conn, reqID, q string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	id := make([]byte, 8)
	rand.Read(id)
	stream := hex.EncodeToString(id)
	// The window runs from the stream's first accepted frame, at or after
	// now: counting it from now errs early.
	end := time.Now().Add(b.window)
	// A receipt refused (the quota, among others) is skipped like a
	// progress frame: the next frame begins the stream.
	c.ReplyStream(ctx, reqID, wecom.Stream{ID: stream, Content: b.receipt})
	var (
		mu   sync.Mutex
		text strings.Builder
	)
	done := make(chan error, 1)
	go func() {
		done <- b.backend.Stream(ctx, ai.Request{TaskID: stream, Messages: []ai.Message{{Role: ai.RoleUser, Content: q}}}, func(d string) error {
			mu.Lock()
			text.WriteString(d)
			mu.Unlock()
			return nil
		})
	}()
	so := func() string {
		mu.Lock()
		defer mu.Unlock()
		return text.String()
	}
	tk := time.NewTicker(b.tick)
	defer tk.Stop()
	closing := time.NewTimer(time.Until(end.Add(-b.margin)))
	defer closing.Stop()
	shown := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.Done():
			return
		case err := <-done:
			if err == nil {
				b.final(ctx, c, reqID, wecom.Stream{ID: stream, Finish: true, Content: so()}, end)
			}
			return
		case <-closing.C:
			b.final(ctx, c, reqID, wecom.Stream{ID: stream, Finish: true, Content: so()}, end)
			return
		case <-tk.C:
		}
		// A progress frame WeCom refuses, for the quota or anything else,
		// is skipped: the next tick sends the answer so far.
		if t := so(); t != "" && t != shown && c.ReplyStream(ctx, reqID, wecom.Stream{ID: stream, Content: t}) == nil {
			shown = t
		}
	}
}

// final sends the final frame s until it is accepted; refused for the
// conversation's quota (45009), it is sent again after b.retry while the
// stream's window (ending at end) lasts. Any other refusal or failure
// ends it: a retry would not mend it, and the simulator counts it.
func (b *naiveBot) final(ctx context.Context, c *wecom.Conn, reqID string, s wecom.Stream, end time.Time) {
	for {
		err := c.ReplyStream(ctx, reqID, s)
		if err == nil || wecom.ErrCodeOf(err) != wecom.ErrCodeRateLimited {
			return
		}
		if !time.Now().Add(b.retry).Before(end) || !pause.For(ctx, b.retry) {
			return
		}
	}
}
