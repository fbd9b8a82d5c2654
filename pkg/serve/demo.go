package serve

import (
	"context"
	"net/http"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/access"
	"github.com/botctl/botctl/pkg/demoui"
)

// demoPage is the demo page (pkg/demoui) on this node's API, or nil when
// the node talks to real WeCom: the page's live view shows users'
// questions, so it is served only where the users are the simulator's.
func (n *Node) demoPage() http.Handler {
	sim := demoui.SimulatorURL(n.cfg.WeCom.URL)
	if sim == "" {
		return nil
	}
	bots := make([]string, len(n.cfg.Bots))
	for i, b := range n.cfg.Bots {
		bots[i] = b.ID
	}
	receipt := n.cfg.Access.ReceiptText
	if receipt == "" {
		receipt = access.DefaultReceipt
	}
	p := n.cfg.Push
	return demoui.Handler(demoui.Config{
		NodeID: n.cfg.NodeID, Bots: bots, Sim: sim,
		Texts: demoui.Texts{Receipt: receipt, HeartbeatLine: p.HeartbeatLine, QueuedLine: p.QueuedLine, TruncatedNote: p.TruncatedNote},
		// Posting a user message is the page's one write: behind the
		// token, like every write of the node API.
		Protect: func(h http.Handler) http.Handler { return requireToken(n.token, h) },
		View: func(ctx context.Context) demoui.View {
			var store *jetstream.Store
			if n.started() {
				store = n.Store
			}
			return demoui.ReadView(ctx, demoui.Sources{NodeID: n.cfg.NodeID, Bots: bots, Etcd: n.etcd, Store: store})
		},
	})
}
