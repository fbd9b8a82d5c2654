package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/pause"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The env gate: gate/<bot> names the one env whose nodes may connect the
// bot (only one environment may use a bot's credentials). The first node
// to look claims it for its env; botctl bots gate moves it.

// errGateMoved stops a term whose bot's gate no longer names this node's
// env (gracefully: the term is ours until it resigns).
var errGateMoved = errors.New("env gate moved to another environment")

// claimGate is ClaimGate plus the revision to watch from.
func claimGate(ctx context.Context, cli *clientv3.Client, prefix, bot, env string) (string, int64, error) {
	key := prefix + gateDir + bot
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, env)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return "", 0, fmt.Errorf("claim env gate of bot %s: %w", bot, err)
	}
	if resp.Succeeded {
		return env, resp.Header.Revision, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return "", 0, errors.New("env gate vanished while claiming")
	}
	return string(kvs[0].Value), resp.Header.Revision, nil
}

// waitGate watches the bot's gate from after rev until changed(env) holds
// for a new value ("" when deleted), and reports whether it did (false: ctx
// ended first).
func (n *Node) waitGate(ctx context.Context, bot string, rev int64, changed func(env string) bool) bool {
	key := n.cfg.Prefix + gateDir + bot
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range n.cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				if wctx.Err() == nil {
					n.etcdError("gate")
				}
				break
			}
			for _, ev := range wr.Events {
				rev = ev.Kv.ModRevision
				env := string(ev.Kv.Value)
				if ev.Type == mvccpb.DELETE {
					env = ""
				}
				if changed(env) {
					cancel()
					return true
				}
			}
		}
		cancel()
		pause.For(ctx, time.Second)
	}
	return false
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

// gatedReason is the status of a bot whose env gate names another env.
func gatedReason(bot, gate, env string) string {
	return fmt.Sprintf("not connecting: bot %s's env gate names env %q and this node is env %q (only one environment may use a bot's credentials); "+
		"to move the bot to this env: botctl bots gate --bot %s --env %s", bot, gate, env, bot, env)
}
