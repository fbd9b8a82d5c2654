package serve

import (
	"context"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/node"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// jetStreamHealth is the node's data-plane say in its candidacy
// (nats.jetstream_failover), asking the other nodes through the node
// registry (jsPeers).
func (n *Node) jetStreamHealth(nc *nats.Conn, cli *clientv3.Client, log zerolog.Logger) *jetstream.JetStreamHealth {
	h := jetstream.NewJetStreamHealth(nc, n.cfg.NATS.JetStreamFailover, log)
	h.Peers = jsPeers{n: n, cli: cli}
	return h
}

// jsPeers are the other nodes as the node registry shows them: whether
// another node's JetStream answers, and this node's registration
// rewritten when its own JetStream health changes.
type jsPeers struct {
	n   *Node // its Node is set before the node's loops ask
	cli *clientv3.Client
}

// jsPeersTimeout bounds the registry read.
const jsPeersTimeout = 2 * time.Second

func (p jsPeers) JetStreamAnswers() bool {
	ctx, cancel := context.WithTimeout(context.Background(), jsPeersTimeout)
	defer cancel()
	return node.JetStreamAnswersElsewhere(ctx, p.cli, node.DefaultPrefix, p.n.cfg.NodeID)
}

func (p jsPeers) Refresh() {
	if p.n.Node != nil {
		p.n.Node.Refresh()
	}
}
