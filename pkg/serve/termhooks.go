package serve

import (
	"context"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/wecom"
)

// termHooks is a connected term's work on this node (node.TermHooks): the
// bot's pusher and the lifecycle's sweep on its connection (Node.leading),
// then access's wait for every callback that connection delivered.
type termHooks struct{ n *Node }

func (h termHooks) WorkOnConn(ctx context.Context, term *election.Term, conn *wecom.Conn) {
	h.n.leading(ctx, term, conn)
}

func (h termHooks) Drain(ctx context.Context, term *election.Term) {
	h.n.Access.WaitTerm(ctx, term)
}
