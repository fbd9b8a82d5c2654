package pusher_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// A running answer's text written before the term's pusher began (the
// inbound path and the worker were quicker than the pusher's start; a
// bot's first term; a progress bucket begun again) is shown at once, not
// at the record's refresh (30 s). The first step of a running task with
// nothing watched does not read the output (it waits for the watch:
// TestRunningTaskWithNothingWrittenIsNotRead), so the watch must see
// every text the bucket holds: on a bucket with no watermark it begins at
// the bucket's first revision, not at its end. Under load in CI the
// pusher's start lost this race to the test's first write, and
// TestUnchangedContentSendsNoFrame timed out waiting for its progress
// frame; this test makes the write come first every time.
func TestOutputWrittenBeforeThePusherBeganIsShown(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	rec := r.ask("alice", "hi") // no pusher yet: its rebuild finds the task
	r.write(rec.ID, "partial", false)
	r.start(pusher.Config{Heartbeat: time.Hour})
	// Well inside the record's 30 s refresh: only the watch can have told.
	testwait.Eventually(t, 15*time.Second, "the text written before the pusher began, shown", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == "partial"
	})
}

// A term that ends while its output watch is being made ends: Run
// returns. nats.go stops a watch whose context ends in that moment (its
// consumer made, the handler that closes its channel not set yet) without
// ever closing the watch's channel, and the watch, ranging over it,
// waited for ever, and Run with it: under load,
// TestReplyPushedAfterFailover, which stops its first pusher right after
// starting it, hung until the test binary's 15-minute timeout. Here the
// term ends as the answer that made the watch's consumer reaches the
// pusher, 200 times: without the fix a try hangs within the first few
// dozen (checked).
func TestTermEndingAsItsWatchIsMadeEnds(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	// A second connection hears copies of the JetStream API's answers to
	// the pusher's requests (their reply subjects are inboxes).
	nc, err := nats.Connect(r.js.Conn.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	watchMade := []byte(`"stream_name":"KV_` + r.js.Store.Names().ProgressBucket + `"`)
	end := make(chan context.CancelFunc, 1)
	sub, err := nc.Subscribe("_INBOX.>", func(m *nats.Msg) {
		if bytes.Contains(m.Data, []byte("consumer_create_response")) && bytes.Contains(m.Data, watchMade) {
			select {
			case cancel := <-end:
				cancel()
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for try := range 200 {
		p, err := pusher.New(pusher.Config{Bot: "b", NodeID: "n1", TermRev: r.term, Conn: r.conn, Store: r.js.Store, Budget: r.budget, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		end <- cancel
		done := make(chan struct{})
		go func() { defer close(done); p.Run(ctx) }()
		select {
		case <-done:
		case <-time.After(waitLong):
			t.Fatalf("try %d: the term ended as its watch was made, and Run has not returned %s later", try, waitLong)
		}
		select { // a try whose watch was made before the answer was heard
		case <-end:
		default:
		}
		cancel()
	}
}
