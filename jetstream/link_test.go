package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/faultproxy"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// A KV call in flight when the connection leaves its server (here its
// link blackholed, as a frozen server's) is never answered; at the
// reconnect it ends with ErrAbandoned, a timeout to every caller, instead
// of waiting for its context's deadline. One made after works.
func TestCallInFlightEndsAtTheReconnect(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	px, err := faultproxy.New("127.0.0.1:0", env.Server.ClientURL()[len("nats://"):])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	nc, err := nats.Connect("nats://"+px.Addr(), nats.PingInterval(200*time.Millisecond), nats.MaxPingsOutstanding(2),
		nats.ReconnectWait(100*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := jetstream.Declare(ctx, js, jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Tasks().Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}

	px.Blackhole()
	done := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		_, err := st.Tasks().Get(cctx, "k")
		done <- err
	}()
	testwait.Eventually(t, 30*time.Second, "the client to leave the silent link", func() bool { return nc.Status() != nats.CONNECTED })
	px.Heal()
	select {
	case err := <-done:
		if !errors.Is(err, jetstream.ErrAbandoned) || !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("the call in flight ended with %v, want ErrAbandoned (a timeout)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call in flight still waits, 30 s after the reconnect began")
	}
	testwait.Eventually(t, 30*time.Second, "reconnected", func() bool { return nc.Status() == nats.CONNECTED })
	if e, err := st.Tasks().Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
		t.Fatalf("after the reconnect: %v", err)
	}
}
