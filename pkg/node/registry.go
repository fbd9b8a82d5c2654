package node

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/botctl/botctl/pkg/etcdkeys"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Keys in etcd, under Config.Prefix (default etcdkeys.Root; pkg/etcdkeys
// has the whole layout):
//
//	nodes/<node>                    Info, bound to the node's registry lease
//	gate/<bot>                      the env allowed to connect bot (plain text)
//	transitions/<bot>/<unix ns>     LeaderEvent (JSON), the last MaxLeaderEvents kept
//
// Election keys live under the election package's prefix.
const (
	// DefaultPrefix is Config.Prefix's default.
	DefaultPrefix = etcdkeys.Root

	nodesDir  = etcdkeys.NodesDir
	gateDir   = etcdkeys.GateDir
	eventsDir = etcdkeys.TransitionsDir
	// MaxLeaderEvents is how many leader events per bot are kept in etcd.
	MaxLeaderEvents = 50
)

// Info is what a node registers: the service discovery record other nodes
// and operators read.
type Info struct {
	ID      string               `json:"id"`
	Address string               `json:"address"`
	Version string               `json:"version"`
	Env     string               `json:"env"`
	Slots   int                  `json:"slots"`
	Roles   []string             `json:"roles"`
	Started time.Time            `json:"started"`
	Bots    map[string]BotStatus `json:"bots"`
	// Host and PID locate the process (botctl drill --kind kill-leader
	// kills it when it runs on the drill's machine).
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
	// JetStreamFailing: the node's JetStream fails while its NATS
	// connection is up (Config.DataPlane).
	JetStreamFailing bool `json:"jetstream_failing,omitempty"`
	// Weight is the node's capacity for leading bots relative to the
	// others' (election.balance.weight); 0 (a release before the
	// balancer) reads as 1.
	Weight float64 `json:"weight,omitempty"`
	// Balance is the node's balancer settings; nil: it does not balance.
	Balance *BalanceSettings `json:"balance,omitempty"`
}

// JetStreamAnswersElsewhere reports whether a registered node other than
// self says its JetStream answers.
func JetStreamAnswersElsewhere(ctx context.Context, cli *clientv3.Client, prefix, self string) bool {
	nodes, err := Nodes(ctx, cli, prefix)
	if err != nil {
		return false
	}
	for _, in := range nodes {
		if in.ID != self && !in.JetStreamFailing {
			return true
		}
	}
	return false
}

// BotState is one node's relation to one bot.
type BotState string

const (
	StateStarting   BotState = "starting"
	StateStandby    BotState = "standby"     // campaigning; another node leads
	StateConnecting BotState = "connecting"  // won, verifying and dialing
	StateLeader     BotState = "leader"      // holds the connection
	StateDraining   BotState = "draining"    // connection closed; handling what it delivered, then resigning
	StateGated      BotState = "gated"       // the bot's gate names another env
	StateNeedsHuman BotState = "needs_human" // auth failed, or another holder of the credentials keeps kicking: see the reason
	StateBackoff    BotState = "backoff"     // waiting before campaigning again
	StateClockOff   BotState = "clock_off"   // this node's clock is off JetStream's by more than nats.max_clock_skew: not campaigning
	StateStopped    BotState = "stopped"
	StateRefused    BotState = "refused" // a registered bot this node will not serve (no or another cluster key…): see the reason
)

// BotStatus is one node's view of one bot.
type BotStatus struct {
	State   BotState  `json:"state"`
	Since   time.Time `json:"since"`
	Reason  string    `json:"reason,omitempty"`
	TermRev int64     `json:"term,omitempty"`
}

// Nodes lists the registered nodes, sorted by id.
func Nodes(ctx context.Context, cli *clientv3.Client, prefix string) ([]Info, error) {
	resp, err := cli.Get(ctx, prefix+nodesDir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read node registry: %w", err)
	}
	var out []Info
	for _, kv := range resp.Kvs {
		var in Info
		if err := json.Unmarshal(kv.Value, &in); err != nil {
			continue
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
