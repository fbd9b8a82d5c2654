package natscount_test

import (
	"fmt"
	"testing"

	"github.com/botctl/botctl/internal/natscount"
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/nats-io/nats.go"
)

// Load counts every message sent before it, on the subjects given and
// matching; Reset forgets those and none sent after it. Counted on
// another connection than the sender's, as a test that watches the code
// under test does.
func TestCountsWhatWasSentBefore(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{})
	sub, _ := testenv.Connect(t, env.Server.ClientURL())
	c := natscount.New(t, sub, env.Conn, []string{"x.>", "y"}, func(m *nats.Msg) bool { return string(m.Data) != "skip" })
	send := func(subj, data string) {
		if err := env.Conn.Publish(subj, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 500 {
		send(fmt.Sprintf("x.%d", i%7), "")
	}
	send("y", "skip")
	send("z", "")
	if n := c.Load(); n != 500 {
		t.Fatalf("Load = %d, want 500 (x.> and y, not the skipped one, not z)", n)
	}
	send("y", "")
	c.Reset()
	send("x.1", "")
	if n := c.Load(); n != 1 {
		t.Fatalf("Load after Reset = %d, want 1: the message sent before it forgotten, the one after counted", n)
	}
}
