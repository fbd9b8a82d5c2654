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

// value is this candidate's election value (since nil while it waits):
// it advertises the pulse it publishes, per bot or its node's record.
func (e *Elector) value(since *time.Time) value {
	v := value{Node: e.cfg.NodeID, Since: since}
	switch {
	case e.cfg.NoPulse:
	case e.cfg.Batch != nil:
		v.NodePulseMS = e.cfg.PulseTimeout.Milliseconds()
	default:
		v.PulseMS = e.cfg.PulseTimeout.Milliseconds()
	}
	return v
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

// beats advances the term's counter in its node's pulse record
// (Config.Batch) four times every PulseInterval until the term ends: the
// record, written every PulseInterval, then carries the counter as it
// was at most a quarter interval before. Only this loop advances it, so a
// term whose loop stops (a test's hold, the process's scheduler) shows a
// counter standing still in records its node goes on writing. A deposed
// term learns it from its key watch, Verify, or its next renewal (the
// lease revoked), not from the record, which no compare ties to the term.
func (t *Term) beats() {
	defer t.wg.Done()
	tick := t.e.cfg.Clock.NewTicker(t.e.cfg.PulseInterval / 4)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C():
		}
		if t.e.held(t.ctx) != nil {
			return
		}
		t.beat.n.Add(1)
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
// again), or something fails. A leader that advertises a node pulse is
// followed in its node's record (records.go), one of 0.5.0's kind in its
// per-bot pulse key; one that advertises neither is never deposed.
func (e *Elector) watchLeader(ctx context.Context, own clientv3.LeaseID) error {
	resp, err := e.cli.Txn(ctx).Then(
		clientv3.OpGet(e.name+"/", clientv3.WithFirstCreate()...),
	).Commit()
	if err != nil {
		return fmt.Errorf("read leader: %w", err)
	}
	from := resp.Header.Revision + 1
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	elCh := e.cli.Watch(wctx, e.name+"/", clientv3.WithPrefix(), clientv3.WithRev(from))
	leaders := resp.Responses[0].GetResponseRange().Kvs
	var (
		leader *mvccpb.KeyValue
		l      LeaderInfo
	)
	if len(leaders) > 0 {
		leader, l = leaders[0], leaderInfo(leaders[0])
		if clientv3.LeaseID(leader.Lease) == own {
			<-ctx.Done() // we lead: Campaign returns now
			return nil
		}
	}
	if leader == nil || l.PulseTimeout == 0 {
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
	src := e.sourceOf(leader, l)
	// The pulse is read after the leader's key, at a later revision: a
	// sight read before the key could belong to an earlier term.
	first, err := src.read(ctx)
	if err != nil {
		return err
	}
	timeout := max(l.PulseTimeout, e.cfg.PulseTimeout)
	st := newStall(e.cfg.Clock.Now(), first, timeout, e.cfg.PulseInterval)
	var (
		pulseCh clientv3.WatchChan
		subCh   chan struct{}
	)
	if src.node == "" {
		pulseCh = e.cli.Watch(wctx, e.pulseKey, clientv3.WithRev(first.At+1))
	} else {
		s, leave := e.records().subscribe(src.key)
		defer leave()
		subCh = s.ch
	}
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
				var kv *mvccpb.KeyValue
				if ev.Type == mvccpb.PUT {
					kv = ev.Kv
				}
				st.observe(e.cfg.Clock.Now(), src.parse(ev.Kv.ModRevision, kv))
			}
			timer.Reset(st.due(e.cfg.Clock.Now()))
		case <-subCh:
			if cur, ok := e.records().sight(src.key, e.cfg.BotID, leader.CreateRevision); ok {
				st.observe(e.cfg.Clock.Now(), cur)
			}
			timer.Reset(st.due(e.cfg.Clock.Now()))
		case <-timer.C():
			changed, err := e.confirmAndDepose(ctx, leader, src, st)
			if err != nil || changed {
				return err
			}
			timer.Reset(st.due(e.cfg.Clock.Now()))
		}
	}
}

// pulseSource is where a standby reads one leader's pulse: its per-bot
// pulse key (node ""), or its node's record.
type pulseSource struct {
	e      *Elector
	leader *mvccpb.KeyValue
	key    string // compared on at the deposition
	node   string
}

func (e *Elector) sourceOf(leader *mvccpb.KeyValue, l LeaderInfo) pulseSource {
	if l.NodePulse {
		return pulseSource{e: e, leader: leader, key: e.cfg.NodePulsePrefix + l.Node, node: l.Node}
	}
	return pulseSource{e: e, leader: leader, key: e.pulseKey}
}

// parse is the sight of kv (nil: absent) at revision at.
func (p pulseSource) parse(at int64, kv *mvccpb.KeyValue) pulseSeen {
	if kv == nil {
		return pulseSeen{At: at}
	}
	if p.node != "" {
		return parseRecord(at, kv.Value, kv.ModRevision, p.e.cfg.BotID, p.leader.CreateRevision)
	}
	s := pulseSeen{At: at, Rev: kv.ModRevision}
	if kv.Lease == p.leader.Lease {
		s.N = kv.ModRevision
	}
	return s
}

// read is one linearizable read of the pulse.
func (p pulseSource) read(ctx context.Context) (pulseSeen, error) {
	resp, err := p.e.cli.Get(ctx, p.key)
	if err != nil {
		return pulseSeen{}, fmt.Errorf("read the leader's pulse: %w", err)
	}
	return p.parse(resp.Header.Revision, firstKV(resp.Kvs)), nil
}

func firstKV(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}

// records is the node pulse records' follower this Elector's standby
// reads: its Batch's, shared by the node's Electors, or its own.
func (e *Elector) records() *records {
	if e.cfg.Batch != nil {
		return e.cfg.Batch.read
	}
	e.recOnce.Do(func() {
		e.rec = newRecords(e.cli, e.cfg.NodePulsePrefix, e.cfg.RetryPeriod, e.log)
	})
	return e.rec
}

// confirmAndDepose is called when the leader's pulse has not been seen to
// move for the stall's timeout. It confirms that with a linearizable read
// and, if it holds, deposes the leader. changed reports that the leader
// changed (deposed by us or gone): the caller reads again. Otherwise st
// says when to look again.
func (e *Elector) confirmAndDepose(ctx context.Context, leader *mvccpb.KeyValue, src pulseSource, st *stall) (changed bool, err error) {
	l := leaderInfo(leader)
	rctx, cancel := context.WithTimeout(ctx, st.timeout)
	defer cancel()
	start := e.cfg.Clock.Now()
	resp, err := e.cli.Txn(rctx).Then(clientv3.OpGet(string(leader.Key)), clientv3.OpGet(src.key)).Commit()
	now := e.cfg.Clock.Now()
	rtt := now.Sub(start)
	if err != nil {
		return false, fmt.Errorf("confirm the leader's pulse: %w", err)
	}
	keys := resp.Responses[0].GetResponseRange().Kvs
	if len(keys) == 0 || keys[0].Lease != leader.Lease || keys[0].CreateRevision != leader.CreateRevision {
		return true, nil
	}
	read := src.parse(resp.Header.Revision, firstKV(resp.Responses[1].GetResponseRange().Kvs))
	stale := now.Sub(st.lastMove)
	switch st.confirm(now, read, rtt) {
	case lagged:
		// Our watch lagged (this node was slow), not the leader.
		e.log.Info().Str("leader", l.Node).Int64("pulse", read.N).Dur("unseen_for", stale).
			Msg("leader's pulse looked stale but had moved (this node's watch lagged); not deposing")
		st.restart(now)
		return false, nil
	case slowRead:
		// A read that slow says etcd (or this node) is slow: the leader's
		// pulses may be slow for the same reason. Not evidence of a hang.
		e.log.Info().Str("leader", l.Node).Dur("confirm_rtt", rtt).Dur("unseen_for", stale).
			Msg("leader's pulse is stale but etcd answered slowly; not deposing on this evidence")
		st.restart(now)
		return false, nil
	case notYet:
		return false, nil
	}
	// The deposition compares exactly what was read: a pulse etcd
	// accepted meanwhile (the per-bot key's, or any write of the node's
	// record), a new leader or a new lease makes it fail. Its answer is
	// waited for up to the TTL, not the pulse timeout: the compares make a
	// late commit as safe as a prompt one, and a client that gave up on a
	// commit etcd applied would not know it deposed. Nor does ctx end it:
	// this node's own campaign sees the key go and wins, which ends ctx,
	// sometimes before the commit's answer is back (the deposition then
	// went uncounted: TestHungLeaderIsDeposed).
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.TTL)
	defer cancel()
	d, err := e.cli.Txn(dctx).If(
		clientv3.Compare(clientv3.CreateRevision(string(leader.Key)), "=", leader.CreateRevision),
		clientv3.Compare(clientv3.LeaseValue(string(leader.Key)), "=", clientv3.LeaseID(leader.Lease)),
		clientv3.Compare(clientv3.ModRevision(src.key), "=", read.Rev),
	).Then(clientv3.OpDelete(string(leader.Key))).Commit()
	if err != nil {
		return false, fmt.Errorf("depose the leader: %w", err)
	}
	if !d.Succeeded {
		if src.node != "" {
			// The node's record was written meanwhile (every
			// PulseInterval, whatever this term did): look again at once,
			// in the same window.
			return false, nil
		}
		return true, nil // something moved at the last moment: read again
	}
	e.depositions.Add(1)
	// The key is gone (the leader's term ends on its key watch, its next
	// per-bot pulse or Verify); revoking the lease also deletes a per-bot
	// pulse and makes its renewals fail.
	var revokeErr error
	rvctx, cancel := context.WithTimeout(ctx, e.cfg.TTL)
	defer cancel()
	if _, revokeErr = e.cli.Revoke(rvctx, clientv3.LeaseID(leader.Lease)); errors.Is(revokeErr, rpctypes.ErrLeaseNotFound) {
		revokeErr = nil
	}
	e.log.Warn().Str("leader", l.Node).Str("key", l.Key).Str("lease", leaseHex(l.Lease)).Int64("term", l.Rev).
		Str("pulse_key", src.key).Int64("pulse_rev", read.Rev).Int64("pulse", read.N).Dur("unseen_for", stale.Round(time.Millisecond)).Dur("pulse_timeout", st.timeout).
		Dur("confirm_rtt", rtt.Round(time.Microsecond)).Int64("at_rev", resp.Header.Revision).AnErr("revoke", revokeErr).
		Msg("deposed the leader: its liveness pulse stood still (confirmed by a linearizable read; deletion compared on it)")
	return true, nil
}
