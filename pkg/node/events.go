package node

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/schema"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// LeaderEvent is one change of a bot's leadership on a node (leading,
// connected, kicked, resigned…), as recorded in etcd: the bot's history
// for operators (botctl status) and for counting foreign kicks over the
// cluster.
type LeaderEvent struct {
	At      time.Time `json:"at"`
	Bot     string    `json:"bot"`
	Node    string    `json:"node"`
	Event   string    `json:"event"` // "leading", "connected", "reconnecting" (a blip, same term), "lost", "auth_failed"…
	Reason  string    `json:"reason,omitempty"`
	TermRev int64     `json:"term,omitempty"`
}

// LeaderEvents returns bot's recent leader events, oldest first.
func LeaderEvents(ctx context.Context, cli *clientv3.Client, prefix, bot string, limit int) ([]LeaderEvent, error) {
	resp, err := cli.Get(ctx, prefix+eventsDir+bot+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("read leader events of bot %s: %w", bot, err)
	}
	out := make([]LeaderEvent, 0, len(resp.Kvs))
	for i := len(resp.Kvs) - 1; i >= 0; i-- {
		var tr LeaderEvent
		if json.Unmarshal(resp.Kvs[i].Value, &tr) == nil {
			out = append(out, tr)
		}
	}
	return out, nil
}

func putLeaderEvent(ctx context.Context, cli *clientv3.Client, prefix string, tr LeaderEvent) error {
	dir := prefix + eventsDir + tr.Bot + "/"
	raw, _ := schema.Marshal(tr)
	if _, err := cli.Put(ctx, fmt.Sprintf("%s%020d", dir, tr.At.UnixNano()), string(raw)); err != nil {
		return err
	}
	// Keep the newest MaxLeaderEvents: delete everything before the oldest kept.
	resp, err := cli.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(MaxLeaderEvents+1))
	if err != nil || len(resp.Kvs) <= MaxLeaderEvents {
		return err
	}
	oldestKept := string(resp.Kvs[MaxLeaderEvents-1].Key)
	_, err = cli.Delete(ctx, dir, clientv3.WithRange(oldestKept))
	return err
}

// leaderEvent records a leadership change in etcd (best effort: it is for
// operators, and must not hold up a failover).
//
// It is written off the loop (its time is taken now, and events are
// keyed by it, so they keep their order): the "leading" record at term
// start does not delay Verify and Dial by an etcd round trip.
func (n *Node) leaderEvent(bot, event, reason string, term int64) {
	tr := LeaderEvent{At: time.Now().UTC(), Bot: bot, Node: n.cfg.NodeID, Event: event, Reason: reason, TermRev: term}
	n.records.Go(func() { n.record(tr) })
}

// leaderEventNow is leaderEvent written before it returns: for records the
// loop reads back at once (the cluster's foreign kicks are counted from
// them).
func (n *Node) leaderEventNow(bot, event, reason string, term int64) {
	n.record(LeaderEvent{At: time.Now().UTC(), Bot: bot, Node: n.cfg.NodeID, Event: event, Reason: reason, TermRev: term})
}

func (n *Node) record(tr LeaderEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), LeaderEventTimeout)
	defer cancel()
	if err := putLeaderEvent(ctx, n.cli, n.cfg.Prefix, tr); err != nil {
		n.etcdError("transition")
		n.log.Debug().Err(err).Str("bot", tr.Bot).Msg("record leader event failed")
	}
}
