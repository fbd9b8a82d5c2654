// Package natscount counts, for a test, the NATS messages that reach the
// server on some subjects (JetStream API requests, mostly: how many reads
// or writes the code under test made), and waits until every message a
// connection sent before a point is counted.
//
// Every subscription feeds one channel, which the subscribing
// connection's reader fills in the order the server relayed the messages,
// and one goroutine counts them. With a goroutine per subscription
// (nats.Conn.Subscribe) a message could be counted after a later one, and
// a count reset could swallow a message sent before it or count one as
// after it. Settle publishes a mark on the sending connection after its
// messages; the server relays a connection's messages in order, so once
// the mark is counted, so is everything sent before it.
package natscount

import (
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/nats-io/nats.go"
)

// settleTimeout bounds the wait for a mark: generous, for a loaded
// machine.
const settleTimeout = 30 * time.Second

// Counter counts the messages heard on its subjects that match.
type Counter struct {
	t     testing.TB
	pub   *nats.Conn
	mark  string
	mu    sync.Mutex
	n     int
	marks int
	sent  int
}

// New counts the messages on subjects that match (every one when match
// is nil), as sub hears them, from now until t ends. pub is the
// connection whose messages Settle waits for: the code under test's (sub
// itself, or another connection to the same server).
func New(t testing.TB, sub, pub *nats.Conn, subjects []string, match func(*nats.Msg) bool) *Counter {
	t.Helper()
	c := &Counter{t: t, pub: pub, mark: nats.NewInbox()}
	heard := make(chan *nats.Msg, 1<<16)
	for _, subj := range append(subjects, c.mark) {
		s, err := sub.ChanSubscribe(subj, heard)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Unsubscribe() })
	}
	stop, counted := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(counted)
		for {
			select {
			case <-stop:
				return
			case m := <-heard:
				c.mu.Lock()
				switch {
				case m.Subject == c.mark:
					c.marks++
				case match == nil || match(m):
					c.n++
				}
				c.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-counted })
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// Settle waits until every message pub sent before the call is counted.
func (c *Counter) Settle() {
	c.t.Helper()
	c.sent++
	sent := c.sent
	if err := c.pub.Publish(c.mark, nil); err != nil {
		c.t.Fatal(err)
	}
	testwait.Eventually(c.t, settleTimeout, "the count's mark", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.marks >= sent
	})
}

// Load is the count, every message pub sent before the call included.
func (c *Counter) Load() int {
	c.t.Helper()
	c.Settle()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Reset sets the count to 0 once every message pub sent before the call
// is counted: those are not counted again.
func (c *Counter) Reset() {
	c.t.Helper()
	c.Settle()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = 0
}
