package node

import (
	"context"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/pause"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// buildWatch follows the registered nodes' builds for every standby of
// this node at once: one read and one watch of the registry while any
// standby waits, each registry entry decoded once however many bots stand
// by. A registry entry lists every bot's state, so it is large with many
// bots and rewritten often while they change: read per standby, it would
// cost each node bots × nodes decodes of it at every rewrite.
type buildWatch struct {
	n *Node

	mu      sync.Mutex
	users   int
	stop    context.CancelFunc
	done    chan struct{}
	builds  map[string]Build
	current bool          // builds is what the registry says (false while the watch is begun again)
	changed chan struct{} // closed when builds or current changes
}

func newBuildWatch(n *Node) *buildWatch {
	return &buildWatch{n: n, changed: make(chan struct{})}
}

// acquire starts the watch for its first user; release stops it after the
// last.
func (w *buildWatch) acquire() (release func()) {
	w.mu.Lock()
	w.users++
	if w.users == 1 {
		ctx, cancel := context.WithCancel(context.Background())
		w.stop, w.done = cancel, make(chan struct{})
		go w.run(ctx, w.done)
	}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		w.users--
		var done chan struct{}
		if w.users == 0 {
			w.stop()
			done = w.done
		}
		w.mu.Unlock()
		if done != nil {
			<-done
		}
	}
}

// snapshot is a copy of the builds, whether they are current, and a
// channel closed at their next change.
func (w *buildWatch) snapshot() (map[string]Build, bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.builds), w.current, w.changed
}

// set replaces the builds (current) or marks them stale (nil), and tells
// the waiters if anything changed.
func (w *buildWatch) set(b map[string]Build, current bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !current && !w.current, current && w.current && maps.Equal(b, w.builds):
		return
	case current:
		w.builds = b
	}
	w.current = current
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *buildWatch) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	dir := w.n.cfg.Prefix + nodesDir
	for ctx.Err() == nil {
		builds, rev, err := w.n.builds(ctx)
		if err == nil {
			w.set(builds, true)
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for wr := range w.n.cli.Watch(wctx, dir, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
				if wr.Err() != nil {
					break
				}
				next := maps.Clone(builds)
				for _, ev := range wr.Events {
					id := strings.TrimPrefix(string(ev.Kv.Key), dir)
					if ev.Type == clientv3.EventTypeDelete {
						delete(next, id) // a node gone makes no one step back
						continue
					}
					if b, known := buildOf(ev.Kv.Value); known {
						next[id] = b
					}
				}
				builds = next
				w.set(builds, true)
			}
			cancel()
		}
		w.set(nil, false)
		pause.For(ctx, time.Second)
	}
}
