package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/schema"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The liveness pulse (see the package comment, "Hung leaders").
//
// The leader's side: every PulseInterval one transaction, "if the term's
// key still has the term's CreateRevision, put the pulse key bound to the
// term's lease". The pulse's ModRevision moving is the pulse; its value
// (node and term) is for operators.
//
// A standby's side, while it waits in the queue: watch the leader's key
// and the pulse key; when the pulse has not moved for the leader's
// PulseTimeout (by this node's clock, from when it last saw it move),
// confirm with a linearizable read that the pulse's ModRevision is still
// the one last seen and the leader's key is still the same lease and
// revision; then depose, with one transaction compared on exactly that
// evidence (so that a pulse etcd accepted before it, however slowly,
// prevents it), and revoke the leader's lease.

// errPulseNotOurs: the pulse was refused because the term's key is no
// longer the term's.
var errPulseNotOurs = errors.New("election key is no longer this term's")

// pulseValue is the pulse key's value.
type pulseValue struct {
	Node    string `json:"node"`
	TermRev int64  `json:"term"`
}

func (e *Elector) pulseMS() int64 {
	if e.cfg.NoPulse {
		return 0
	}
	return e.cfg.PulseTimeout.Milliseconds()
}

// pulseTxn is one pulse of the term whose key is key, created at rev,
// bound to lease.
func (e *Elector) pulseTxn(ctx context.Context, key string, rev int64, lease clientv3.LeaseID) clientv3.Txn {
	val, _ := schema.Marshal(pulseValue{Node: e.cfg.NodeID, TermRev: rev})
	return e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpPut(e.pulseKey, string(val), clientv3.WithLease(lease)))
}

// putPulse writes one pulse; errPulseNotOurs if the key is not the term's.
func (e *Elector) putPulse(ctx context.Context, key string, rev int64, lease clientv3.LeaseID) error {
	resp, err := e.pulseTxn(ctx, key, rev, lease).Commit()
	if err != nil {
		return fmt.Errorf("pulse: %w", err)
	}
	if !resp.Succeeded {
		return errPulseNotOurs
	}
	return nil
}

// pulse bumps the term's pulse every PulseInterval until the term ends. A
// pulse refused because the key is no longer ours ends the term (a
// standby deposed us while we were paused, or an operator deleted the
// key). A pulse that fails otherwise is logged and tried again at the next
// tick: the renewal watchdog, not the pulse, decides when an unreachable
// etcd ends the term (a standby that can reach etcd deposes us sooner,
// which is the point: we may be the one cut off).
func (t *Term) pulse() {
	defer t.wg.Done()
	cfg := t.e.cfg
	tick := cfg.Clock.NewTicker(cfg.PulseInterval)
	defer tick.Stop()
	failing := 0
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C():
		}
		if t.e.held(t.ctx) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(t.ctx, cfg.PulseTimeout)
		// errPulseNotOurs is an answer, not a failure: it ends the hedge.
		notOurs, err := hedge(ctx, cfg.Clock, cfg.HedgeAfter, func(ctx context.Context) (bool, error) {
			err := t.e.putPulse(ctx, t.Key, t.Rev, t.Lease)
			if errors.Is(err, errPulseNotOurs) {
				return true, nil
			}
			return false, err
		})
		cancel()
		if notOurs {
			err = errPulseNotOurs
		}
		switch {
		case err == nil:
			if failing > 0 {
				t.log.Info().Int("failed", failing).Msg("pulse written again")
			}
			failing = 0
		case errors.Is(err, errPulseNotOurs):
			t.lose(fmt.Errorf("%w: pulse refused: election key %s is no longer this term's (deposed by a standby that saw no pulse, or deleted)", ErrNotLeader, t.Key))
			return
		case t.ctx.Err() != nil:
			return
		default:
			failing++
			if failing == 1 || failing%10 == 0 {
				t.log.Warn().Err(err).Int("failed", failing).Msg("pulse failed; standbys may depose this leader if it keeps failing")
			}
		}
	}
}

// Depositions is how many leaders this Elector has deposed (each one a
// leader whose pulse it saw stand still for the leader's PulseTimeout,
// confirmed by a linearizable read).
func (e *Elector) Depositions() int64 { return e.depositions.Load() }

// held blocks while a test holds the Elector's pulses and renewals.
func (e *Elector) held(ctx context.Context) error {
	if ch := e.hold.Load(); ch != nil {
		select {
		case <-*ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// watchPulse runs while this node's candidacy (lease own) waits in the
// queue, until ctx ends: it deposes a leader whose pulse stops.
func (e *Elector) watchPulse(ctx context.Context, own clientv3.LeaseID) {
	if e.cfg.NoPulse {
		return
	}
	for ctx.Err() == nil {
		if err := e.watchLeader(ctx, own); err != nil && ctx.Err() == nil {
			e.log.Debug().Err(err).Msg("watching the leader's pulse failed; retrying")
			if !pause.For(ctx, e.cfg.RetryPeriod) {
				return
			}
		}
	}
}

// watchLeader watches the current leader until it changes (nil: read
// again), or something fails.
func (e *Elector) watchLeader(ctx context.Context, own clientv3.LeaseID) error {
	resp, err := e.cli.Txn(ctx).Then(
		clientv3.OpGet(e.name+"/", clientv3.WithFirstCreate()...),
		clientv3.OpGet(e.pulseKey),
	).Commit()
	if err != nil {
		return fmt.Errorf("read leader and pulse: %w", err)
	}
	from := resp.Header.Revision + 1
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	elCh := e.cli.Watch(wctx, e.name+"/", clientv3.WithPrefix(), clientv3.WithRev(from))
	leaders := resp.Responses[0].GetResponseRange().Kvs
	var leader *mvccpb.KeyValue
	timeout := time.Duration(0)
	if len(leaders) > 0 {
		leader = leaders[0]
		if clientv3.LeaseID(leader.Lease) == own {
			<-ctx.Done() // we lead: Campaign returns now
			return nil
		}
		if adv := leaderInfo(leader).PulseTimeout; adv > 0 {
			timeout = max(adv, e.cfg.PulseTimeout)
		}
	}
	if timeout == 0 {
		// No leader, or one that publishes no pulse (it is never deposed):
		// wait for the election to change.
		for wr := range elCh {
			if wr.Err() != nil {
				return wr.Err()
			}
			if len(wr.Events) > 0 {
				return nil
			}
		}
		return ctx.Err()
	}

	var pulseRev int64 // the pulse key's ModRevision last seen (0: absent)
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		pulseRev = kvs[0].ModRevision
	}
	lastMove := time.Now()
	pulseCh := e.cli.Watch(wctx, e.pulseKey, clientv3.WithRev(from))
	timer := e.cfg.Clock.NewTimer(timeout)
	defer timer.Stop()
	for {
		if e.held(ctx) != nil { // tests: this node is the slow one
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case wr, ok := <-elCh:
			if !ok || wr.Err() != nil {
				return fmt.Errorf("election watch: %v", wr.Err())
			}
			for _, ev := range wr.Events {
				if string(ev.Kv.Key) == string(leader.Key) && ev.Type == mvccpb.DELETE {
					return nil // a new leader: read again
				}
			}
		case wr, ok := <-pulseCh:
			if !ok || wr.Err() != nil {
				return fmt.Errorf("pulse watch: %v", wr.Err())
			}
			for _, ev := range wr.Events {
				pulseRev = ev.Kv.ModRevision
				if ev.Type == mvccpb.PUT && ev.Kv.Lease == leader.Lease {
					lastMove = time.Now()
				}
			}
			timer.Reset(time.Until(lastMove.Add(timeout)))
		case <-timer.C():
			changed, err := e.confirmAndDepose(ctx, leader, &pulseRev, lastMove, timeout)
			if err != nil || changed {
				return err
			}
			// The pulse moved after all, or the evidence was not clean:
			// a new window from now.
			lastMove = time.Now()
			timer.Reset(timeout)
		}
	}
}

// confirmAndDepose is called when the leader's pulse has not been seen to
// move since lastMove for timeout. It confirms that with a linearizable
// read and, if it holds, deposes the leader. changed reports that the
// leader changed (deposed by us or gone): the caller reads again.
func (e *Elector) confirmAndDepose(ctx context.Context, leader *mvccpb.KeyValue, pulseRev *int64, lastMove time.Time, timeout time.Duration) (changed bool, err error) {
	l := leaderInfo(leader)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	resp, err := e.cli.Txn(rctx).Then(clientv3.OpGet(string(leader.Key)), clientv3.OpGet(e.pulseKey)).Commit()
	rtt := time.Since(start)
	if err != nil {
		return false, fmt.Errorf("confirm the leader's pulse: %w", err)
	}
	keys := resp.Responses[0].GetResponseRange().Kvs
	if len(keys) == 0 || keys[0].Lease != leader.Lease || keys[0].CreateRevision != leader.CreateRevision {
		return true, nil
	}
	var cur int64
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		cur = kvs[0].ModRevision
	}
	stale := time.Since(lastMove)
	if cur != *pulseRev {
		// Our watch lagged (this node was slow), not the leader.
		e.log.Info().Str("leader", l.Node).Int64("pulse_rev", cur).Int64("pulse_rev_seen", *pulseRev).Dur("unseen_for", stale).
			Msg("leader's pulse looked stale but had moved (this node's watch lagged); not deposing")
		*pulseRev = cur
		return false, nil
	}
	if rtt > e.cfg.PulseInterval {
		// A read that slow says etcd (or this node) is slow: the leader's
		// pulses may be slow for the same reason. Not evidence of a hang.
		e.log.Info().Str("leader", l.Node).Dur("confirm_rtt", rtt).Dur("unseen_for", stale).
			Msg("leader's pulse is stale but etcd answered slowly; not deposing on this evidence")
		return false, nil
	}
	// The deposition compares exactly what was read: a pulse etcd
	// accepted meanwhile, a new leader or a new lease makes it fail. Its
	// answer is waited for up to the TTL, not the pulse timeout: the
	// compares make a late commit as safe as a prompt one, and a client
	// that gave up on a commit etcd applied would not know it deposed.
	// Nor does ctx end it: this node's own campaign sees the key go and
	// wins, which ends ctx, sometimes before the commit's answer is back
	// (the deposition then went uncounted: TestHungLeaderIsDeposed).
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.TTL)
	defer cancel()
	d, err := e.cli.Txn(dctx).If(
		clientv3.Compare(clientv3.CreateRevision(string(leader.Key)), "=", leader.CreateRevision),
		clientv3.Compare(clientv3.LeaseValue(string(leader.Key)), "=", clientv3.LeaseID(leader.Lease)),
		clientv3.Compare(clientv3.ModRevision(e.pulseKey), "=", cur),
	).Then(clientv3.OpDelete(string(leader.Key))).Commit()
	if err != nil {
		return false, fmt.Errorf("depose the leader: %w", err)
	}
	if !d.Succeeded {
		return true, nil // something moved at the last moment: read again
	}
	e.depositions.Add(1)
	// The key is gone (the leader's term ends on its next watch event,
	// pulse or Verify); revoking the lease also deletes its pulse and makes
	// its renewals fail.
	var revokeErr error
	rvctx, cancel := context.WithTimeout(ctx, e.cfg.TTL)
	defer cancel()
	if _, revokeErr = e.cli.Revoke(rvctx, clientv3.LeaseID(leader.Lease)); errors.Is(revokeErr, rpctypes.ErrLeaseNotFound) {
		revokeErr = nil
	}
	e.log.Warn().Str("leader", l.Node).Str("key", l.Key).Str("lease", leaseHex(l.Lease)).Int64("term", l.Rev).
		Int64("pulse_rev", cur).Dur("unseen_for", stale.Round(time.Millisecond)).Dur("pulse_timeout", timeout).
		Dur("confirm_rtt", rtt.Round(time.Microsecond)).Int64("at_rev", resp.Header.Revision).AnErr("revoke", revokeErr).
		Msg("deposed the leader: its liveness pulse stood still (confirmed by a linearizable read; deletion compared on it)")
	return true, nil
}
