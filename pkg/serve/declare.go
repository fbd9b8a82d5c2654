package serve

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/etcdkeys"
	"github.com/botctl/botctl/pkg/redact"
	"github.com/botctl/botctl/pkg/retry"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// declareLock takes a cluster-wide lock (an etcd mutex under /botctl/)
// for the declaration of the JetStream names of prefix, so that nodes
// starting together declare one after another: on a NATS cluster at
// replicas 3, concurrent creations of the same streams and buckets (and
// their updates turning direct gets off) time out against each other for
// minutes, while one after another they take about a second each. The
// lock is a courtesy, not a
// guarantee (Declare is idempotent): when etcd does not answer, or the
// holder takes longer than declareLockWait, the node declares anyway.
func declareLock(ctx context.Context, cli *clientv3.Client, prefix string, log zerolog.Logger) (unlock func()) {
	none := func() {}
	if cli == nil {
		return none
	}
	gctx, cancel := context.WithTimeout(ctx, declareLockWait)
	defer cancel()
	lease, err := cli.Grant(gctx, declareLockTTL)
	if err != nil {
		log.Debug().Err(err).Msg("declare lock not taken (etcd); declaring without it")
		return none
	}
	sctx, stop := context.WithCancel(ctx)
	sess, err := concurrency.NewSession(cli, concurrency.WithLease(lease.ID), concurrency.WithContext(sctx))
	if err != nil {
		stop()
		log.Debug().Err(err).Msg("declare lock not taken (etcd); declaring without it")
		return none
	}
	m := concurrency.NewMutex(sess, etcdkeys.Default.Declare(prefix))
	if err := m.Lock(gctx); err != nil {
		sess.Close()
		stop()
		log.Info().Err(err).Dur("waited", declareLockWait).Msg("declare lock not taken; declaring without it")
		return none
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		m.Unlock(uctx)
		cancel()
		sess.Close() // revokes the lease
		stop()
	}
}

// declareLockWait bounds the wait for the declare lock; declareLockTTL
// (seconds) is its lease: a node that dies holding it frees it that soon.
const (
	declareLockWait = 45 * time.Second
	declareLockTTL  = 10
)

// jsErrNoPeers is nats-server's JSClusterNoPeersErrF (10005, "no suitable
// peers for placement"), which nats.go does not name.
const jsErrNoPeers natsjs.ErrorCode = 10005

// declare declares JetStream's streams and buckets, retrying (with
// progress in the log) until it succeeds or ctx ends: the node serves in
// the meantime, spooling what it receives. It gives up if nc is closed:
// nats.go closes a connection that a server refused twice with the same
// authorization error, and no wait fixes the credentials. ackWait, if
// set, overrides the task queue's ack wait (tests); the warnings of a
// deployment that keeps its own settings go to log.
func declare(ctx context.Context, nc *nats.Conn, natsCfg config.NATS, js natsjs.JetStream, opts jetstream.Options, ackWait time.Duration, log zerolog.Logger) (*jetstream.Store, error) {
	opts.TaskAckWait, opts.Logger = ackWait, log
	for backoff := retry.New(time.Second, 15*time.Second); ; {
		wait := backoff.Next()
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		store, err := jetstream.Declare(dctx, js, opts)
		cancel()
		if err == nil {
			return store, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if nc.IsClosed() {
			if refused := natsCfg.RefusedError(nc.LastError()); refused != nil {
				return nil, redact.Error(refused)
			}
			return nil, fmt.Errorf("NATS connection closed: %w", redact.Error(nc.LastError()))
		}
		var apiErr *natsjs.APIError
		switch {
		case jetstream.StorageTooSmall(err):
			// The servers' storage cannot set aside the media bound and
			// the reservation (a cluster says so with 10005 too): the
			// error names the key to lower. Waiting will not fix it.
			return nil, fmt.Errorf("declare JetStream streams and buckets: %w", err)
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrNoPeers:
			// Fewer servers up than the replicas asked for: a cluster
			// still forming (every node of a fresh deploy starting at
			// once), a server down, or a cluster smaller than
			// nats.replicas. Only the last is a configuration problem,
			// and the warning names it.
			log.Warn().Err(err).Int("replicas", opts.Replicas).Dur("retry_in", wait).
				Msg("JetStream has too few servers up to place the store's replicas: waiting, receiving into the local spool (if the cluster has fewer servers than nats.replicas, lower nats.replicas)")
		case errors.As(err, &apiErr) && apiErr.ErrorCode != natsjs.JSErrCodeJetStreamNotEnabled && apiErr.Code != 503:
			// JetStream answered and refused: a configuration problem
			// (a name taken by a stream botctl cannot change), not an
			// outage. Waiting will not fix it.
			return nil, fmt.Errorf("declare JetStream streams and buckets: %w", err)
		default:
			log.Warn().Err(err).Dur("retry_in", wait).Msg("JetStream unreachable: receiving into the local spool until it answers")
		}
		if !clock.Sleep(ctx, clock.Real, wait) {
			return nil, ctx.Err()
		}
	}
}
