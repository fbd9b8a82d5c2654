package node

import (
	"context"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/schema"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// registryGap is the least time between two rewrites of the node's record.
const registryGap = 250 * time.Millisecond

// register keeps the node's record under a lease, rewriting it when a bot's
// state changes, until ctx ends; then it revokes the lease (removing the
// record at once).
func (n *Node) register(ctx context.Context) {
	key := etcdkeys.Layout{Root: n.cfg.Prefix}.Node(n.cfg.NodeID)
	ttl := int64(n.cfg.RegistryTTL / time.Second)
	if ttl < 2 {
		ttl = 2
	}
	for ctx.Err() == nil {
		lease, err := n.cli.Grant(ctx, ttl)
		if err != nil {
			if ctx.Err() == nil {
				n.etcdError("registry")
			}
			n.log.Warn().Err(err).Msg("node registry: grant lease failed; retrying")
			pause.For(ctx, time.Second)
			continue
		}
		n.keepRegistered(ctx, key, lease.ID)
		rctx, cancel := context.WithTimeout(context.Background(), RevokeTimeout)
		n.cli.Revoke(rctx, lease.ID)
		cancel()
	}
}

func (n *Node) keepRegistered(ctx context.Context, key string, lease clientv3.LeaseID) {
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ka, err := n.cli.KeepAlive(kctx, lease)
	if err != nil {
		n.etcdError("registry")
		n.log.Warn().Err(err).Msg("node registry: keep-alive failed")
		return
	}
	put := func() error {
		raw, _ := schema.Marshal(n.Info())
		_, err := n.cli.Put(kctx, key, string(raw), clientv3.WithLease(lease))
		return err
	}
	if err := put(); err != nil {
		if ctx.Err() == nil {
			n.etcdError("registry")
		}
		n.log.Warn().Err(err).Msg("node registry: register failed")
		return
	}
	// Rewrites are at least registryGap apart: the record lists every
	// bot's state, so while many bots change (a start, a failover) it is
	// written a few times a second, not once per change.
	gap := clock.Or(n.cfg.Clock).NewTimer(registryGap)
	defer gap.Stop()
	var pending <-chan struct{} = n.dirty
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ka:
			if !ok {
				if ctx.Err() == nil {
					n.etcdError("registry") // keep-alives unanswered for the lease's TTL
				}
				n.log.Warn().Msg("node registry: lease lost; registering again")
				return
			}
		case <-gap.C():
			pending = n.dirty
		case <-pending:
			pending = nil
			gap.Reset(registryGap)
			if err := put(); err != nil {
				if ctx.Err() == nil {
					n.etcdError("registry")
					n.log.Warn().Err(err).Msg("node registry: update failed")
				}
				return
			}
		}
	}
}
