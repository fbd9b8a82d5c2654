package fleet

import (
	"context"

	"github.com/botctl/botctl/pkg/etcdkv"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Change is one bot's record as Watch reports it.
type Change struct {
	// Bot is the record (after the change); when Removed, only its ID
	// and Rev (the deletion's revision) are set.
	Bot     Bot
	Removed bool
}

// Watch calls apply with every record stored, then with each change as
// etcd reports it, until ctx ends. A watch lost (etcd compacted past it,
// a member gone) is begun again from a fresh read, in which every record
// is applied again and a bot gone meanwhile is applied as removed. A
// value that is not a record is logged (never its content) and skipped:
// the bot keeps the record last applied (etcdkv.Watch).
// apply runs on Watch's goroutine, in the order of the changes. A
// running node follows the registry with it (Follower).
func Watch(ctx context.Context, cli *clientv3.Client, prefix string, apply func(Change), log zerolog.Logger) {
	etcdkv.Watch(ctx, cli, prefix+Dir, decoder(prefix), func(b Bot) string { return b.ID }, func(ev etcdkv.Event[Bot]) {
		if ev.Deleted {
			apply(Change{Bot: Bot{ID: ev.Name, Rev: ev.Rev}, Removed: true})
			return
		}
		apply(Change{Bot: ev.Record})
	}, "bot registry", log)
}
