package pusher_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

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
