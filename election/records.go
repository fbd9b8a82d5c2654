package election

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// records follows every node pulse record under a prefix for the standbys
// of one node: one watch while any standby looks, each record decoded once
// however many standbys read it.
type records struct {
	cli    *clientv3.Client
	prefix string
	retry  time.Duration
	log    zerolog.Logger

	mu     sync.Mutex
	users  int
	stop   context.CancelFunc
	done   chan struct{}
	state  map[string]recordState       // by record key
	subs   map[string]map[*sub]struct{} // by record key
	broken bool                         // the watch is being begun again: sights are not current
}

type recordState struct {
	at, modRev int64 // the revision it is as of, its ModRevision (0: absent)
	terms      map[string][2]int64
}

type sub struct{ ch chan struct{} }

func newRecords(cli *clientv3.Client, prefix string, retry time.Duration, log zerolog.Logger) *records {
	return &records{cli: cli, prefix: prefix, retry: retry, log: log, state: map[string]recordState{}, subs: map[string]map[*sub]struct{}{}}
}

// subscribe tells s of every change of the record key from now on, until
// the returned func is called. The first subscriber starts the watch, the
// last one's leaving stops it.
func (r *records) subscribe(key string) (*sub, func()) {
	s := &sub{ch: make(chan struct{}, 1)}
	r.mu.Lock()
	if r.subs[key] == nil {
		r.subs[key] = map[*sub]struct{}{}
	}
	r.subs[key][s] = struct{}{}
	r.users++
	if r.users == 1 {
		ctx, cancel := context.WithCancel(context.Background())
		r.stop, r.done = cancel, make(chan struct{})
		go r.run(ctx, r.done)
	}
	r.mu.Unlock()
	return s, func() {
		r.mu.Lock()
		delete(r.subs[key], s)
		if len(r.subs[key]) == 0 {
			delete(r.subs, key)
		}
		r.users--
		var done chan struct{}
		if r.users == 0 {
			r.stop()
			done = r.done
			r.state = map[string]recordState{}
		}
		r.mu.Unlock()
		if done != nil {
			<-done
		}
	}
}

// sight is bot's term rev in record key as this watch last saw it; ok is
// false while the watch is not current.
func (r *records) sight(key, bot string, rev int64) (pulseSeen, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.state[key]
	if !ok || r.broken {
		return pulseSeen{}, false
	}
	s := pulseSeen{At: st.at, Rev: st.modRev}
	if t, ok := st.terms[bot]; ok && t[0] == rev {
		s.N = t[1]
	}
	return s, true
}

func (r *records) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		if err := r.follow(ctx); err != nil && ctx.Err() == nil {
			r.log.Debug().Err(err).Msg("watching the node pulse records failed; retrying")
		}
		r.mu.Lock()
		r.broken = true
		r.mu.Unlock()
		if !pause.For(ctx, r.retry) {
			return
		}
	}
}

// follow reads every record, then applies the watch's events until it
// breaks.
func (r *records) follow(ctx context.Context) error {
	resp, err := r.cli.Get(ctx, r.prefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.state = map[string]recordState{}
	for _, kv := range resp.Kvs {
		r.state[string(kv.Key)] = decodeRecord(resp.Header.Revision, kv)
	}
	r.broken = false
	r.notifyLocked(nil)
	r.mu.Unlock()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range r.cli.Watch(wctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		r.mu.Lock()
		changed := map[string]bool{}
		for _, ev := range wr.Events {
			k := string(ev.Kv.Key)
			if ev.Type == mvccpb.DELETE {
				r.state[k] = recordState{at: wr.Header.Revision}
			} else {
				r.state[k] = decodeRecord(wr.Header.Revision, ev.Kv)
			}
			changed[k] = true
		}
		r.notifyLocked(changed)
		r.mu.Unlock()
	}
	return ctx.Err()
}

// notifyLocked wakes the subscribers of the changed records (nil: all).
func (r *records) notifyLocked(changed map[string]bool) {
	for key, subs := range r.subs {
		if changed != nil && !changed[key] {
			continue
		}
		for s := range subs {
			select {
			case s.ch <- struct{}{}:
			default:
			}
		}
	}
}

func decodeRecord(at int64, kv *mvccpb.KeyValue) recordState {
	st := recordState{at: at, modRev: kv.ModRevision}
	var rec nodeRecord
	if schema.Check("node pulse", kv.Value) == nil && json.Unmarshal(kv.Value, &rec) == nil {
		st.terms = rec.Terms
	}
	return st
}
