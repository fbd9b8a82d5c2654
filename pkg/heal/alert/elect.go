package alert

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrSessionLost ends a term whose etcd session expired (network, a long
// pause): another node may lead already.
var ErrSessionLost = errors.New("alerter: etcd session lost")

// electionRetry is the pause before campaigning again after a failure.
const electionRetry = time.Second

// RunElected campaigns for the alerter's leadership on prefix (default
// DefaultPrefix) as nodeID and runs a.Run only while leader: each term's
// context ends when the etcd session (TTL DefaultElectionTTL) is lost or
// ctx ends. A lost term is campaigned for again. On ctx's end the
// session is closed, which hands leadership over at once, and nil is
// returned; an error only for bad arguments.
//
// Leadership is not fencing: for up to the session TTL an old leader cut
// off from etcd can still run next to a new one. Alerts stay single
// anyway, as each is recorded with a compare-and-set before it is sent.
func RunElected(ctx context.Context, cli *clientv3.Client, prefix string, nodeID string, a *Alerter) error {
	if cli == nil || a == nil || nodeID == "" {
		return fmt.Errorf("%w: RunElected needs an etcd client, an alerter and a node id", ErrConfig)
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	log := a.log.With().Str("election", prefix).Logger()
	for ctx.Err() == nil {
		err := a.term(ctx, cli, prefix, nodeID)
		if ctx.Err() != nil {
			break
		}
		log.Warn().Err(err).Dur("retry_in", electionRetry).Msg("alerter term over; campaigning again")
		clock.Sleep(ctx, a.cfg.Clock, electionRetry)
	}
	return nil
}

// term is one campaign and, if won, one leadership.
func (a *Alerter) term(ctx context.Context, cli *clientv3.Client, prefix, nodeID string) error {
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(DefaultElectionTTL/time.Second)))
	if err != nil {
		a.etcdError(ctx, "alert_session")
		return fmt.Errorf("etcd session: %w", err)
	}
	// Close revokes the lease: the election key goes with it and the next
	// candidate leads at once.
	defer sess.Close()

	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(sess.Ctx(), cancel) // session lost: the term (or campaign) ends
	defer stop()

	el := concurrency.NewElection(sess, strings.TrimSuffix(prefix, "/"))
	if err := el.Campaign(tctx, nodeID); err != nil {
		if sess.Ctx().Err() != nil {
			return ErrSessionLost
		}
		a.etcdError(ctx, "alert_campaign")
		return fmt.Errorf("campaign: %w", err)
	}
	log := a.log.With().Str("election", prefix).Int64("lease", int64(sess.Lease())).Logger()
	log.Info().Msg("alerter leader: running")
	err = a.Run(tctx)
	log.Info().Err(err).Msg("alerter leadership over")
	if err == nil && sess.Ctx().Err() != nil && ctx.Err() == nil {
		return ErrSessionLost
	}
	return err
}

// etcdError tells Config.Metrics about a failed request of op, unless
// ctx ended (the node stopping cancels its requests: not a failure).
func (a *Alerter) etcdError(ctx context.Context, op string) {
	if a.cfg.Metrics != nil && ctx.Err() == nil {
		a.cfg.Metrics.EtcdError(op)
	}
}
