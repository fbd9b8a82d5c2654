package node

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Keys in etcd, under Config.Prefix (default "/botctl/"):
//
//	nodes/<node>                    Info, bound to the node's registry lease
//	gate/<bot>                      the env allowed to connect bot (plain text)
//	transitions/<bot>/<unix ns>     Transition (JSON), the last MaxTransitions kept
//
// Election keys live under the election package's prefix.
const (
	nodesDir       = "nodes/"
	gateDir        = "gate/"
	transitionsDir = "transitions/"
	// MaxTransitions is how many transitions per bot are kept in etcd.
	MaxTransitions = 50
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
	StateStopped    BotState = "stopped"
)

// BotStatus is one node's view of one bot.
type BotStatus struct {
	State  BotState  `json:"state"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason,omitempty"`
	Term   int64     `json:"term,omitempty"`
}

// Transition is one change of a bot's leadership, as recorded in etcd.
type Transition struct {
	At     time.Time `json:"at"`
	Bot    string    `json:"bot"`
	Node   string    `json:"node"`
	Event  string    `json:"event"` // "leading", "connected", "lost", "auth_failed"…
	Reason string    `json:"reason,omitempty"`
	Term   int64     `json:"term,omitempty"`
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

// Transitions returns bot's recent transitions, newest last.
func Transitions(ctx context.Context, cli *clientv3.Client, prefix, bot string, limit int) ([]Transition, error) {
	resp, err := cli.Get(ctx, prefix+transitionsDir+bot+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("read transitions of bot %s: %w", bot, err)
	}
	out := make([]Transition, 0, len(resp.Kvs))
	for i := len(resp.Kvs) - 1; i >= 0; i-- {
		var tr Transition
		if json.Unmarshal(resp.Kvs[i].Value, &tr) == nil {
			out = append(out, tr)
		}
	}
	return out, nil
}

func recordTransition(ctx context.Context, cli *clientv3.Client, prefix string, tr Transition) error {
	dir := prefix + transitionsDir + tr.Bot + "/"
	raw, _ := json.Marshal(tr)
	if _, err := cli.Put(ctx, fmt.Sprintf("%s%020d", dir, tr.At.UnixNano()), string(raw)); err != nil {
		return err
	}
	// Keep the newest MaxTransitions: delete everything before the oldest kept.
	resp, err := cli.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(MaxTransitions+1))
	if err != nil || len(resp.Kvs) <= MaxTransitions {
		return err
	}
	oldestKept := string(resp.Kvs[MaxTransitions-1].Key)
	_, err = cli.Delete(ctx, dir, clientv3.WithRange(oldestKept))
	return err
}

// Gate returns the env allowed to connect bot, or "" if none claimed it.
func Gate(ctx context.Context, cli *clientv3.Client, prefix, bot string) (string, error) {
	resp, err := cli.Get(ctx, prefix+gateDir+bot)
	if err != nil {
		return "", fmt.Errorf("read env gate of bot %s: %w", bot, err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// ClaimGate sets bot's gate to env if nobody claimed it yet (first claim
// wins) and returns the gate's env afterwards.
func ClaimGate(ctx context.Context, cli *clientv3.Client, prefix, bot, env string) (string, error) {
	gate, _, err := claimGate(ctx, cli, prefix, bot, env)
	return gate, err
}

// SetGate moves bot's gate to env (botctl bots gate). The leader of another
// env sees the change, closes its connection and resigns.
func SetGate(ctx context.Context, cli *clientv3.Client, prefix, bot, env string) error {
	if env == "" || strings.ContainsAny(env, "/ \t\n") {
		return fmt.Errorf("env %q: want a non-empty name without spaces or '/'", env)
	}
	if _, err := cli.Put(ctx, prefix+gateDir+bot, env); err != nil {
		return fmt.Errorf("set env gate of bot %s: %w", bot, err)
	}
	return nil
}

// Gates lists every bot with a gate.
func Gates(ctx context.Context, cli *clientv3.Client, prefix string) (map[string]string, error) {
	resp, err := cli.Get(ctx, prefix+gateDir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read env gates: %w", err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), prefix+gateDir)] = string(kv.Value)
	}
	return out, nil
}
