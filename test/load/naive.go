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
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
)

// naiveMain is the baseline the ramp puts beside botctl: a single-process
// bot written the way single-process bots usually are. It holds the WeCom
// connection itself (pkg/wecom, the same client botctl uses) and answers
// each message in a goroutine of its own: the receipt at once, the answer
// streamed from the same AI backend botctl's workers use (the demo
// backend, ai.New, its deltas every 50 ms, as a model's tokens arrive),
// and every tick the answer so far, the whole answer with finish once the
// stream ends. The answer text is the demo backend's (ai.DemoAnswer), so
// the simulator's recorder matches it as it matches botctl's. Until issue
// 28 it computed the text at each tick instead of streaming it: botctl
// alone paid for the backend's stream, which is not high availability's
// cost (about a third of its workers' CPU). No etcd, no NATS, no record of anything: nothing survives the
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
	backend, err := ai.New(ai.Config{Kind: ai.KindDemo, Demo: ai.DemoConfig{AnswerTime: *answer}})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	h := wecom.MessageFunc(func(c *wecom.Conn, reqID string, m *wecom.MsgCallback) {
		if m.Text == nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			naiveAnswer(ctx, c, backend, reqID, m.Text.Content, receipt, *tick)
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

// naiveAnswer is one conversation's goroutine and ticker: the backend
// streams into text, the ticker sends what has come.
func naiveAnswer(ctx context.Context, c *wecom.Conn, backend ai.Backend, reqID, q, receipt string, tick time.Duration) {
	id := make([]byte, 8)
	rand.Read(id)
	stream := hex.EncodeToString(id)
	// Errors (a quota refusal among them) are not looked at: this is
	// the baseline, and the simulator counts them.
	c.ReplyStream(ctx, reqID, wecom.Stream{ID: stream, Content: receipt})
	var (
		mu   sync.Mutex
		text strings.Builder
	)
	done := make(chan error, 1)
	go func() {
		done <- backend.Stream(ctx, ai.Request{TaskID: stream, Messages: []ai.Message{{Role: ai.RoleUser, Content: q}}}, func(d string) error {
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
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.Done():
			return
		case err := <-done:
			if err == nil {
				c.ReplyStream(ctx, reqID, wecom.Stream{ID: stream, Finish: true, Content: so()})
			}
			return
		case <-tk.C:
		}
		if t := so(); t != "" {
			c.ReplyStream(ctx, reqID, wecom.Stream{ID: stream, Content: t})
		}
	}
}
