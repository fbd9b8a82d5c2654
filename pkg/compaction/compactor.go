package compaction

import (
	"context"
	"errors"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Compactor compacts an etcd cluster's history the way etcd's own
// periodic compactor does: every Retention it compacts to the revision it
// saw one Retention earlier, so the cluster keeps between one and two
// Retentions of history and no more.
//
// Guarantees: it never compacts past a revision older than Retention, so
// a watch that resumes within Retention of its last event (every watch
// botctl keeps does) never meets ErrCompacted because of it. Several
// nodes may run it against one cluster: a compaction another node (or
// etcd itself) did already is not an error. It needs etcd's permission to
// compact (the root role where auth is on); refused, it logs the error
// once and keeps trying, and the compaction warning of /readyz stays.
type Compactor struct {
	Client    *clientv3.Client
	Retention time.Duration
	Clock     clock.Clock // nil: clock.Real
	Log       zerolog.Logger
	// Timeout bounds each etcd call (zero: 10 s).
	Timeout time.Duration
}

// Run compacts until ctx ends.
func (c Compactor) Run(ctx context.Context) {
	seen := c.revision(ctx) // the revision one Retention ago; 0: unknown
	tick := clock.Or(c.Clock).NewTicker(c.Retention)
	defer tick.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
		now := c.revision(ctx)
		if seen > 0 {
			err := c.compact(ctx, seen)
			switch {
			case err == nil:
				lastErr = ""
				c.Log.Debug().Int64("revision", seen).Msg("compacted etcd's history")
			case err.Error() != lastErr:
				lastErr = err.Error()
				c.Log.Warn().Err(err).Int64("revision", seen).Msg("etcd history not compacted; retrying every etcd.compact_retention")
			}
		}
		seen = now
	}
}

func (c Compactor) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 10 * time.Second
}

// revision is the cluster's current revision, 0 if it cannot be read.
func (c Compactor) revision(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	r, err := c.Client.Get(ctx, probeKey, clientv3.WithCountOnly())
	if err != nil {
		return 0
	}
	return r.Header.Revision
}

// compact compacts to rev; a revision compacted already is not an error.
func (c Compactor) compact(ctx context.Context, rev int64) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	_, err := c.Client.Compact(ctx, rev)
	if errors.Is(err, rpctypes.ErrCompacted) {
		return nil
	}
	return err
}
