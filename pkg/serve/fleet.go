package serve

import (
	"context"
	"sync"

	"github.com/botctl/botctl/pkg/botsettings"
	"github.com/botctl/botctl/pkg/fleet"
)

// follow makes the node follow what etcd says of its bots while it runs:
// the overrides of their settings (pkg/bots), and the bot registry
// (fleet.Follower): bots added are served, bots removed drained and
// dropped, on the node's loops (pkg/node) with their settings.
func (n *Node) follow(ctx context.Context, wg *sync.WaitGroup, o Options) {
	wg.Go(func() { n.bots.Watch(ctx) })
	if o.Etcd == nil {
		return
	}
	file := n.cfg
	file.Bots = o.Config.Bots
	f := fleet.NewFollower(o.Etcd, botsettings.DefaultPrefix, file, n.cfg.Bots, n.Node, n.bots, deliveries{n}, n.log)
	wg.Go(func() { f.Run(ctx) })
}

// deliveries are a bot's answers owed on this node (fleet.Deliveries).
type deliveries struct{ n *Node }

func (d deliveries) Leads(bot string) bool { return d.n.Pusher(bot) != nil }

func (d deliveries) Owed(ctx context.Context, bot string) ([]string, error) {
	if !d.n.started() {
		return nil, nil
	}
	return d.n.Store.UndeliveredTasks(ctx, bot)
}

// runNode runs the node's elections (node.Run) once every bot settings
// override etcd holds has been read (bots.Live.Read): a node that leads
// no bot takes no message, so no message is answered under the config
// file's settings when etcd holds an override for its bot (one may narrow
// the bot's allowlists or change its backend). Until then the node
// campaigns for nothing, and the settings watch logs each failed read
// with etcd's error (a role without read on settings/ names it).
func (n *Node) runNode(ctx context.Context) error {
	select {
	case <-n.bots.Read():
	default:
		n.log.Warn().Msg("leading no bot until the bots' settings are read from etcd")
		select {
		case <-n.bots.Read():
			n.log.Info().Msg("bots' settings read from etcd; campaigning")
		case <-ctx.Done():
			return nil
		}
	}
	return n.Node.Run(ctx)
}
