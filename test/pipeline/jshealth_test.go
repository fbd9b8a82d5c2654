package pipeline

import (
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/node"
	"github.com/nats-io/nats-server/v2/server"
)

// The leader's NATS server answers its pings but serves no JetStream (as
// a server cut off from its cluster does): after nats.jetstream_failover
// of failures it moves its connection, then gives up the bot, and a node
// whose JetStream works takes it over and answers.
func TestLeaderWhoseJetStreamFailsGivesUpTheBot(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	noJS, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	noJS.Start()
	t.Cleanup(func() { noJS.Shutdown(); noJS.WaitForShutdown() })
	if !noJS.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats server without JetStream not ready")
	}
	failover := func(cfg *config.Config) { cfg.NATS.JetStreamFailover = 5 * time.Second }
	c.launchOn("a", noJS.ClientURL(), failover)
	testwait.Eventually(t, waitLong, "a leads without JetStream", c.connected)
	b := c.start("b", failover)

	testwait.Eventually(t, 2*waitLong, "b takes the bot over", func() bool {
		return b.node.Node.Status()["b1"].State == node.StateLeader && c.connected()
	})
	c.post("alice", "after the takeover")
	testwait.Eventually(t, waitLong, "answered by b", func() bool { return answered(c.bot("alice"), "after the takeover") == 1 })
}
