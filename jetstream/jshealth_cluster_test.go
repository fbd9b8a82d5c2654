package jetstream_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// A node connected to the one NATS server left of a three-server cluster
// (the other two stopped: pings answered, every JetStream call failing)
// moves its connection after After, and is off After later, since
// JetStream still fails; once the cluster is back, it is on again.
func TestJetStreamHealthOffWhileJetStreamFailsOnALiveConnection(t *testing.T) {
	c := testenv.NewNATSCluster(t, 3)
	for i := range 3 {
		c.Start(t, i)
	}
	testenv.DeclareOnCluster(t, c.URLs(), jetstream.Options{Replicas: 3})
	nc, err := nats.Connect(c.URLs()[0], nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	h := jetstream.NewJetStreamHealth(nc, 2*time.Second, zerolog.Nop())
	if why, off := h.Off(); off {
		t.Fatalf("off on a healthy cluster: %s", why)
	}

	c.Stop(t, 1)
	c.Stop(t, 2)
	// Off only while another node's JetStream answers: a lost quorum
	// (every node failing) leaves the leaders where they are.
	peers := &fakePeers{}
	h.Peers = peers
	testwait.Eventually(t, 2*time.Minute, "failing, moved and failing again", func() bool {
		h.Off()
		return h.Failing() && nc.Stats().Reconnects >= 1
	})
	time.Sleep(3 * time.Second) // past After again: off, but for the peers
	if why, off := h.Off(); off {
		t.Fatalf("off while no other node's JetStream answers: %s", why)
	}
	peers.answers.Store(true)
	testwait.Eventually(t, 2*time.Minute, "off", func() bool {
		_, off := h.Off()
		return off
	})
	if !nc.IsConnected() {
		t.Fatal("the connection is down: the test is about a live one")
	}
	if n := nc.Stats().Reconnects; n < 1 {
		t.Fatalf("off without moving the connection first (%d reconnects)", n)
	}

	c.Start(t, 1)
	c.Start(t, 2)
	testwait.Eventually(t, 2*time.Minute, "on again", func() bool {
		_, off := h.Off()
		return !off
	})
}

// fakePeers are other nodes whose JetStream answers when answers is set.
type fakePeers struct{ answers atomic.Bool }

func (p *fakePeers) JetStreamAnswers() bool { return p.answers.Load() }
func (p *fakePeers) Refresh()               {}
