package jetstream_test

import (
	"context"
	"errors"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The leader's inbound path: publish the task; on ErrUnavailable spool it
// for the forwarder; on ErrConversationBusy answer the user. Tasks are
// spooled while the spool is not empty, so none overtakes an earlier one.
func Example_leader() {
	ctx := context.Background()
	nc, _ := nats.Connect(nats.DefaultURL,
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(-1)) // fail fast while disconnected
	defer nc.Close()
	js, _ := natsjs.New(nc)
	store, err := jetstream.Declare(ctx, js, jetstream.Options{})
	if err != nil {
		return
	}
	spool, err := jetstream.OpenSpool("/var/lib/botctl/spool.db")
	if err != nil {
		return
	}
	defer spool.Close()
	fw, _ := jetstream.NewForwarder(jetstream.ForwarderConfig{
		Spool: spool,
		Publish: store.SpoolPublisher(func(e jetstream.SpoolEntry, res jetstream.PublishResult, err error) {
			// record the outcome; tell the user if the conversation was busy
		}),
	})
	fctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); fw.Run(fctx) }()
	defer func() { stop(); <-done }()

	dispatch := func(bot, conv, msgid string, payload []byte) error {
		if n, err := spool.Len(); err == nil && n == 0 {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			res, err := store.PublishTask(pctx, bot, conv, msgid, payload)
			cancel()
			switch {
			case err == nil && res.Duplicate:
				return nil // already handled
			case err == nil:
				return nil // queued: persist the record, send the receipt
			case errors.Is(err, jetstream.ErrConversationBusy):
				return err // an answer: "a task is already running"
			case !errors.Is(err, jetstream.ErrUnavailable):
				return err // rejected: record as failed
			}
		}
		if err := spool.Append(jetstream.SpoolEntry{Bot: bot, Conversation: conv, MsgID: msgid, Payload: payload, Received: time.Now()}); err != nil {
			return err
		}
		fw.Kick()
		return nil
	}
	_ = dispatch("bot1", "alice", "msgid-1", []byte(`{"text":"hi"}`))
}

// A worker: fetch, keep the task alive while it runs, ack when done, give
// up on the last delivery instead of a Nak that would lock the conversation.
func Example_worker() {
	ctx := context.Background()
	nc, _ := nats.Connect(nats.DefaultURL)
	defer nc.Close()
	js, _ := natsjs.New(nc)
	store, err := jetstream.Declare(ctx, js, jetstream.Options{})
	if err != nil {
		return
	}
	run := func(ctx context.Context, bot, conv string, task []byte) error { return nil }

	batch, err := store.Workers().Fetch(1, natsjs.FetchMaxWait(30*time.Second))
	if err != nil {
		return
	}
	for msg := range batch.Messages() {
		bot, conv, err := store.ParseTaskSubject(msg.Subject())
		if err != nil {
			_ = store.GiveUp(ctx, msg, "unreadable subject: "+err.Error())
			continue
		}
		keepAlive := time.NewTicker(store.Options().TaskAckWait / 3)
		done := make(chan error, 1)
		go func() { done <- run(ctx, bot, conv, msg.Data()) }()
		var runErr error
	wait:
		for {
			select {
			case runErr = <-done:
				break wait
			case <-keepAlive.C:
				_ = msg.InProgress()
			}
		}
		keepAlive.Stop()
		switch {
		case runErr == nil:
			_ = msg.DoubleAck(ctx) // frees the conversation
		case store.FinalDelivery(msg):
			_ = store.GiveUp(ctx, msg, runErr.Error())
		default:
			_ = msg.Nak()
		}
	}
}
