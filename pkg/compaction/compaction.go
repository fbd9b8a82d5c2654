// Package compaction tells whether an etcd cluster compacts its history.
//
// etcd keeps every revision of every key until it is compacted. botctl
// writes all the time (each leader's liveness pulse once a second per bot
// it leads, renewals, task and health records), so a cluster without
// auto-compaction grows until it reaches its space quota and then refuses
// every write: elections, pulses and leadership stop. etcd's clients cannot
// read the server's configuration, so this package reads the one trace
// compaction leaves: the compact revision, the oldest revision the cluster
// can still serve.
//
// Guarantees: Read's compact revision is exact at the moment it ran (found
// by bisection with count-only reads at past revisions, under a key no one
// writes). Non-guarantees: a cluster that compacts by hand, or rarely, is
// indistinguishable from one that does not until its history grows past
// the limits of Warning; the rule is about botctl's write rate, not a
// statement about etcd's disk use.
package compaction

import (
	"context"
	"errors"
	"fmt"

	"github.com/botctl/botctl/pkg/etcdkeys"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// History is how far back a cluster's history reaches.
type History struct {
	Revision  int64 `json:"revision"`  // the cluster's current revision
	Compacted int64 `json:"compacted"` // its compact revision (0: never compacted)
}

// Uncompacted is the number of revisions the cluster keeps.
func (h History) Uncompacted() int64 { return h.Revision - h.Compacted }

// The limits of Warning. NeverCompactedAfter is about a day of one led
// bot's pulse: a cluster with etcd's --auto-compaction-retention (botctl's
// embedded etcd and example cluster: periodic, 1h) has compacted long
// before. MaxUncompacted is an hour and a half of 1,000 writes a second:
// far above what an hourly compaction keeps for a few hundred bots.
const (
	NeverCompactedAfter = 100_000
	MaxUncompacted      = 5_000_000
)

// Warning says what is wrong with h's compaction, naming the fix; "" if
// nothing is.
func (h History) Warning() string {
	const fix = "; configure etcd's auto-compaction (--auto-compaction-mode periodic --auto-compaction-retention 1h, as docs/operations.md requires), or the cluster fills its space quota and refuses every write, elections included"
	switch {
	case h.Compacted == 0 && h.Revision > NeverCompactedAfter:
		return fmt.Sprintf("etcd has never compacted its history (revision %d)%s", h.Revision, fix)
	case h.Uncompacted() > MaxUncompacted:
		return fmt.Sprintf("etcd keeps %d revisions of history uncompacted (revision %d, compacted at %d)%s", h.Uncompacted(), h.Revision, h.Compacted, fix)
	}
	return ""
}

// probeKey is read at past revisions; nobody writes it.
const probeKey = etcdkeys.Root + etcdkeys.CompactionProbe

// Read finds cli's cluster's current and compact revisions: about 30
// count-only reads.
func Read(ctx context.Context, cli *clientv3.Client) (History, error) {
	resp, err := cli.Get(ctx, probeKey, clientv3.WithCountOnly())
	if err != nil {
		return History{}, fmt.Errorf("read etcd's revision: %w", err)
	}
	h := History{Revision: resp.Header.Revision}
	// servable(r): a read at revision r is answered. Revision 1 is the
	// empty store's; servable(h.Revision) holds. Find the least servable
	// revision: the compact revision (a read at it is answered), or 1.
	servable := func(r int64) (bool, error) {
		_, err := cli.Get(ctx, probeKey, clientv3.WithCountOnly(), clientv3.WithRev(r))
		if errors.Is(err, rpctypes.ErrCompacted) {
			return false, nil
		}
		return err == nil, err
	}
	lo, hi := int64(1), h.Revision
	for lo < hi {
		mid := lo + (hi-lo)/2
		ok, err := servable(mid)
		if err != nil {
			return History{}, fmt.Errorf("read etcd's compact revision: %w", err)
		}
		if ok {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo > 1 {
		h.Compacted = lo
	}
	return h, nil
}
