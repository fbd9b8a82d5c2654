package serve

import (
	"context"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/sendapi"
	"github.com/botctl/botctl/pkg/wecom"
)

// sendNode is the node as the shared-connection API sees it
// (sendapi.Node): its bots, the connection and budget of each bot it
// leads, the health gate, and the leader of the others from etcd.
type sendNode struct{ n *Node }

func (s sendNode) Serves(bot string) bool           { return s.n.Node.Serves(bot) }
func (s sendNode) Conn(bot string) *wecom.Conn      { return s.n.obs.conn(bot) }
func (s sendNode) Budget(bot string) sendapi.Budget { return s.n.Budget(bot) }
func (s sendNode) Gate(bot string) sendapi.Gate     { return s.n.Health.Gate(bot) }

// Leader is the node that holds bot's election now and its API address
// from the node registry ("" when it is not registered); the error is
// election.ErrNoLeader when no node does.
func (s sendNode) Leader(ctx context.Context, bot string) (id, addr string, err error) {
	if s.n.etcd == nil {
		return "", "", sendapi.ErrNoLeaderLookup
	}
	info, err := election.Leader(ctx, s.n.etcd, "", bot)
	if err != nil {
		return "", "", err
	}
	nodes, err := node.Nodes(ctx, s.n.etcd, node.DefaultPrefix)
	if err != nil {
		return info.Node, "", err
	}
	for _, in := range nodes {
		if in.ID == info.Node {
			return info.Node, in.Address, nil
		}
	}
	return info.Node, "", nil
}

// conn is this node's connection of bot while it leads it, else nil.
func (o *observer) conn(bot string) *wecom.Conn {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.conns[bot]
}
