// Package etcdkv reads and follows the records kept under one etcd
// prefix, one record a key (the bot registry's, pkg/fleet, and the bot
// settings overrides, pkg/botsettings): List reads them all at one
// revision; Watch hands every record, then each change as etcd reports
// it, and reads them all again whenever the watch is lost.
//
// What is guaranteed: after a lost watch (etcd compacted past it, a
// member gone, no leader) nothing is missed: the fresh read applies every
// record again, and a record applied before and gone since is applied as
// deleted. A value its decoder refuses is logged (the decoder's error,
// which must not quote the value) and skipped: its name keeps what was
// applied last. What is not: that every intermediate value is seen; a
// fresh read sees only the latest.
package etcdkv

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/retry"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Decoder makes a record of a stored key and value at its modification
// revision. Its errors never quote the value.
type Decoder[T any] func(key, value []byte, rev int64) (T, error)

// readTimeout bounds Watch's fresh reads.
const readTimeout = 10 * time.Second

// listed runs between a fresh read and the watch that follows it: a
// seam for tests, which compact etcd past the read there.
var listed = func() {}

// List reads every record under dir, in key order, and the revision read
// at; the values decode refuses are returned as one error beside the
// rest. A failed read: rev 0 and etcd's error, unwrapped (the caller
// names what it read).
func List[T any](ctx context.Context, cli *clientv3.Client, dir string, decode Decoder[T]) (out []T, rev int64, err error) {
	out, _, rev, err = list(ctx, cli, dir, decode)
	return out, rev, err
}

// list is List, and the names (keys after dir) of the values decode
// refused.
func list[T any](ctx context.Context, cli *clientv3.Client, dir string, decode Decoder[T]) (out []T, refused []string, rev int64, err error) {
	resp, err := cli.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, 0, err
	}
	var errs []error
	for _, kv := range resp.Kvs {
		r, err := decode(kv.Key, kv.Value, kv.ModRevision)
		if err != nil {
			errs = append(errs, err)
			refused = append(refused, strings.TrimPrefix(string(kv.Key), dir))
			continue
		}
		out = append(out, r)
	}
	return out, refused, resp.Header.Revision, errors.Join(errs...)
}

// Event is one record's change as Watch applies it: its name (its key
// after dir), the record, or Deleted with only Rev (the deletion's, or
// the fresh read's) set.
type Event[T any] struct {
	Name    string
	Record  T
	Deleted bool
	Rev     int64
}

// Watch applies every record under dir, then each change, until ctx
// ends, on its own goroutine and in etcd's order; name is a record's
// name of its decoded value. what names the records in the log ("bot
// registry").
func Watch[T any](ctx context.Context, cli *clientv3.Client, dir string, decode Decoder[T], name func(T) string, apply func(Event[T]), what string, log zerolog.Logger) {
	WatchRead(ctx, cli, dir, decode, name, apply, nil, what, log)
}

// WatchRead is Watch, calling read (when not nil) after each fresh read's
// records are applied: from its first call on, every record stored when
// Watch began has been applied.
func WatchRead[T any](ctx context.Context, cli *clientv3.Client, dir string, decode Decoder[T], name func(T) string, apply func(Event[T]), read func(), what string, log zerolog.Logger) {
	known := map[string]bool{} // names applied: one gone from a fresh read was deleted meanwhile
	backoff := retry.New(time.Second, 30*time.Second)
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		all, refused, rev, err := list(rctx, cli, dir, decode)
		cancel()
		if rev == 0 {
			wait := backoff.Next()
			if ctx.Err() == nil {
				log.Warn().Err(err).Dur("retry_in", wait).Msg(what + " not read from etcd; retrying")
			}
			pause.For(ctx, wait)
			continue
		}
		if err != nil {
			log.Error().Err(err).Msg(what + ": records skipped")
		}
		now := map[string]bool{}
		for _, n := range refused {
			if known[n] {
				now[n] = true // keeps what was applied last: not a deletion
			}
		}
		for _, r := range all {
			now[name(r)] = true
			apply(Event[T]{Name: name(r), Record: r})
		}
		for n := range known {
			if !now[n] {
				apply(Event[T]{Name: n, Deleted: true, Rev: rev})
			}
		}
		known = now
		if read != nil {
			read()
		}
		listed()
		wctx, stop := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range cli.Watch(wctx, dir, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if err := wr.Err(); err != nil {
				log.Warn().Err(err).Msg(what + " watch lost; reading it again")
				break
			}
			backoff.Reset()
			for _, ev := range wr.Events {
				n := strings.TrimPrefix(string(ev.Kv.Key), dir)
				if ev.Type == clientv3.EventTypeDelete {
					if known[n] {
						delete(known, n)
						apply(Event[T]{Name: n, Deleted: true, Rev: ev.Kv.ModRevision})
					}
					continue
				}
				known[n] = true
				r, err := decode(ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision)
				if err != nil {
					log.Error().Err(err).Msg(what + ": record skipped")
					continue
				}
				apply(Event[T]{Name: n, Record: r, Rev: ev.Kv.ModRevision})
			}
		}
		stop()
		pause.For(ctx, backoff.Next())
	}
}
