package fleet

import (
	"context"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/pause"
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
// the bot keeps the record last applied.
// apply runs on Watch's goroutine, in the order of the changes. A
// running node follows the registry with it (Follower).
func Watch(ctx context.Context, cli *clientv3.Client, prefix string, apply func(Change), log zerolog.Logger) {
	dir := prefix + Dir
	known := map[string]bool{} // bots applied: one gone from a fresh read was removed meanwhile
	for wait := time.Second; ctx.Err() == nil; wait = min(2*wait, 30*time.Second) {
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		all, rev, err := List(rctx, cli, prefix)
		cancel()
		if rev == 0 {
			if ctx.Err() == nil {
				log.Warn().Err(err).Dur("retry_in", wait).Msg("bot registry not read from etcd; retrying")
			}
			pause.For(ctx, wait)
			continue
		}
		if err != nil {
			log.Error().Err(err).Msg("bot records skipped")
		}
		now := map[string]bool{}
		for _, b := range all {
			now[b.ID] = true
			apply(Change{Bot: b})
		}
		for bot := range known {
			if !now[bot] {
				apply(Change{Bot: Bot{ID: bot, Rev: rev}, Removed: true})
			}
		}
		known = now
		wctx, stop := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range cli.Watch(wctx, dir, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if err := wr.Err(); err != nil {
				log.Warn().Err(err).Msg("bot registry watch lost; reading it again")
				break
			}
			wait = time.Second
			for _, ev := range wr.Events {
				bot := strings.TrimPrefix(string(ev.Kv.Key), dir)
				if ev.Type == clientv3.EventTypeDelete {
					if known[bot] {
						delete(known, bot)
						apply(Change{Bot: Bot{ID: bot, Rev: ev.Kv.ModRevision}, Removed: true})
					}
					continue
				}
				b, err := decode(prefix, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision)
				if err != nil {
					log.Error().Err(err).Msg("bot record skipped")
					continue
				}
				known[bot] = true
				apply(Change{Bot: b})
			}
		}
		stop()
		pause.For(ctx, wait)
	}
}
