package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
)

// naiveMain is the baseline the ramp puts beside botctl: a single-process
// bot written the way single-process bots usually are. It holds the WeCom
// connection itself (pkg/wecom, the same client botctl uses) and answers
// each message in a goroutine of its own with a ticker: the receipt at
// once, then every tick the answer so far, the whole answer with finish
// once the demo answer time is up. The answer text is the demo backend's
// (ai.DemoAnswer), so the simulator's recorder matches it as it matches
// botctl's. No etcd, no NATS, no record of anything: nothing survives the
// process, no other node can take over, and nothing paces a conversation
// under its quota but the ticker.
func naiveMain(args []string) error {
	fs := flag.NewFlagSet("naive", flag.ExitOnError)
	url := fs.String("wecom", "", "WeCom (simulator) WebSocket URL")
	bot := fs.String("bot", rampBot, "bot id")
	secret := fs.String("secret", "", "bot secret")
	answer := fs.Duration("answer", 60*time.Second, "how long an answer streams")
	tick := fs.Duration("tick", time.Second, "how often a conversation's answer so far is sent")
	prof := fs.Bool("pprof", false, "serve Go's profiler on a loopback port (printed: \"pprof: URL\")")
	fs.Parse(args)
	if *prof {
		if err := servePprof(); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	receipt := "已收到，正在处理…" // botctl's default receipt (pkg/access)
	var wg sync.WaitGroup
	defer wg.Wait()
	h := wecom.MessageFunc(func(c *wecom.Conn, reqID string, m *wecom.MsgCallback) {
		if m.Text == nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			naiveAnswer(ctx, c, reqID, m.Text.Content, receipt, *answer, *tick)
		}()
	})
	conn, err := wecom.Dial(ctx, wecom.Config{URL: *url, BotID: *bot, Secret: *secret, Logger: zerolog.Nop()}, h)
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

// naiveAnswer is one conversation's goroutine and ticker.
func naiveAnswer(ctx context.Context, c *wecom.Conn, reqID, q, receipt string, answer, tick time.Duration) {
	id := make([]byte, 8)
	rand.Read(id)
	stream := hex.EncodeToString(id)
	full := []rune(ai.DemoAnswer(q, 3, 0))
	start := time.Now()
	// Errors (a quota refusal among them) are not looked at: this is
	// the baseline, and the simulator counts them.
	c.ReplyStream(ctx, reqID, wecom.Stream{ID: stream, Content: receipt})
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.Done():
			return
		case <-tk.C:
		}
		el := time.Since(start)
		if el >= answer {
			c.ReplyStream(ctx, reqID, wecom.Stream{ID: stream, Finish: true, Content: string(full)})
			return
		}
		n := int(float64(len(full)) * float64(el) / float64(answer))
		if n > 0 {
			c.ReplyStream(ctx, reqID, wecom.Stream{ID: stream, Content: string(full[:n])})
		}
	}
}
