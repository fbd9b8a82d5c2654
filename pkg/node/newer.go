package node

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Build is what a node's registry entry says of its build: the schema
// version of its records (0: a release before versions) and its release
// version ("0.5.0"; "dev" or "": not a release).
type Build struct {
	Schema  int
	Release string
}

// Newer reports whether a is a newer build than b: a higher schema
// version, or the same one and a higher release version. A build that is
// not a release (dev) is ordered by its schema version alone.
func (a Build) Newer(b Build) bool {
	if a.Schema != b.Schema {
		return a.Schema > b.Schema
	}
	av, aok := release(a.Release)
	bv, bok := release(b.Release)
	if !aok || !bok {
		return false
	}
	for i := range av {
		if av[i] != bv[i] {
			return av[i] > bv[i]
		}
	}
	return false
}

// release parses "MAJOR.MINOR.PATCH" with an optional "v" and suffix
// ("-rc1", "+meta", " (da8a82efe643)": the registry's version names the
// commit after a space): the suffix is not compared.
func release(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+ "); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// stepBack decides whether node self, waiting in a bot's election queue
// (queue: the node of each candidate key in the order they lead, the
// leader first), leaves the queue and joins it again at the back: it does
// when a live node of a newer build (builds: every registered node's)
// waits behind it. Then the next graceful handover goes to the newer
// node, not to self, which would be stopped for its own upgrade next.
// The leader never steps back (that would be a handover of its own), nor
// does a node whose build, or whose follower's, the registry does not
// know. A node that stepped back is behind every newer candidate, so it
// does not step back again until a newer one joins behind it: the queue
// settles after one step per older standby.
func stepBack(self string, queue []string, builds map[string]Build) bool {
	mine, ok := builds[self]
	if !ok {
		return false
	}
	at := -1
	for i, id := range queue {
		if id == self {
			at = i
			break
		}
	}
	if at <= 0 { // not queued, or leading
		return false
	}
	for _, id := range queue[at+1:] {
		if b, ok := builds[id]; ok && b.Newer(mine) {
			return true
		}
	}
	return false
}

// errStepBack ends a candidacy that stepBack says to join again.
var errStepBack = errors.New("a node of a newer botctl waits behind this one")

// campaign is el.Campaign within stop, the term outliving stop (a graceful
// stop), joined again at the back of the queue whenever stepBack says so
// while this node waits. A term won is kept, even if a step back was
// decided meanwhile.
//
// The balancer's step back (stepBack receiving) is the same withdrawal:
// this node leaves the queue and joins it again at the back, so that the
// new leader the balancer planned, waiting behind it, leads next.
func (n *Node) campaign(stop context.Context, el *election.Elector, stepBack <-chan struct{}, log zerolog.Logger) (*election.Term, error) {
	for {
		camp, cancel := context.WithCancelCause(stop)
		done := make(chan struct{}, 2)
		go func() {
			defer func() { done <- struct{}{} }()
			if n.waitNewer(camp, el) {
				cancel(errStepBack)
			}
		}()
		go func() {
			defer func() { done <- struct{}{} }()
			select {
			case <-camp.Done():
			case <-stepBack:
				cancel(errBalanceStepBack)
			}
		}()
		term, err := el.Campaign(camp, election.WithTermContext(context.WithoutCancel(stop)))
		cause := context.Cause(camp)
		cancel(nil)
		<-done
		<-done
		stepped := errors.Is(cause, errStepBack) || errors.Is(cause, errBalanceStepBack)
		if err == nil || !stepped || stop.Err() != nil {
			return term, err
		}
		if errors.Is(cause, errBalanceStepBack) {
			log.Info().Msg("stepped back in the election for the balancer: joining the queue again at its back")
			continue
		}
		log.Info().Msg("a node of a newer botctl waits behind this one in the election: joining the queue again behind it, so that a handover goes to it")
	}
}

// waitNewer returns true once stepBack says this node should leave el's
// queue, false when ctx ends. It decides at once, and again at each change
// of the bot's queue and at each node that joins the registry or changes
// build (the registry's other rewrites, a bot's state, are not read; the
// builds are followed once for all of this node's standbys: builds.go),
// so a standby costs one read of its queue per change that may matter.
func (n *Node) waitNewer(ctx context.Context, el *election.Elector) bool {
	defer n.newer.acquire()()
	for ctx.Err() == nil {
		builds, current, changed := n.newer.snapshot()
		if !current {
			select {
			case <-changed:
			case <-ctx.Done():
			}
			continue
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		// The queue is watched from a revision read now: a change after
		// it is seen, whatever the first decision read.
		at, err := n.cli.Get(wctx, el.Key()+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			cancel()
			pause.For(ctx, time.Second)
			continue
		}
		queue := n.cli.Watch(wctx, el.Key()+"/", clientv3.WithPrefix(), clientv3.WithRev(at.Header.Revision+1))
		for decide, ok := true, true; ok && ctx.Err() == nil; {
			if decide && n.shouldStepBack(wctx, el, builds) {
				cancel()
				return true
			}
			select {
			case <-changed:
				var now bool
				builds, now, changed = n.newer.snapshot()
				decide, ok = now, now
			case wr, open := <-queue:
				decide, ok = true, open && wr.Err() == nil
			}
		}
		cancel()
		pause.For(ctx, time.Second)
	}
	return false
}

// builds reads every registered node's build, and the revision read at.
func (n *Node) builds(ctx context.Context) (map[string]Build, int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := n.cli.Get(rctx, n.cfg.Prefix+nodesDir, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	out := make(map[string]Build, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if b, ok := buildOf(kv.Value); ok {
			out[strings.TrimPrefix(string(kv.Key), n.cfg.Prefix+nodesDir)] = b
		}
	}
	return out, resp.Header.Revision, nil
}

// buildOf is the build a registry entry states; false if it does not decode.
func buildOf(value []byte) (Build, bool) {
	var in struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(value, &in) != nil {
		return Build{}, false
	}
	return Build{Schema: schema.Of(value), Release: in.Version}, true
}

// shouldStepBack reads el's queue and asks stepBack; a failed read
// decides nothing.
func (n *Node) shouldStepBack(ctx context.Context, el *election.Elector, builds map[string]Build) bool {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	queue, err := el.Candidates(rctx)
	if err != nil {
		return false
	}
	return stepBack(n.cfg.NodeID, queue, builds)
}
