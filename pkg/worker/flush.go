package worker

// The flush request: the leader's pusher, about to show a running answer
// whose text it holds is older than a second (its frame waited for the
// conversation's send budget), asks the node running the task for the
// text now, instead of showing one up to an output interval old (the
// pusher's flush.go). Core NATS on the store's connection: a request lost
// costs the pusher one short wait, and the frame shows what it has.

import (
	"fmt"

	"github.com/nats-io/nats.go"
)

// subscribeFlush hears this node's flush requests: the running attempt
// of the task named writes its text now, if it changed since its last
// write (coalescer.writeNow). A task not running here is ignored.
//
// Only Run subscribes, and that covers the tasks run off the queue too
// (Execute, Go: a fixed worker's exec API, the leader's tier 3): the node
// (pkg/serve's start) builds its one worker and starts its Run under the
// same context as both of those as it opens them (a flush request comes
// for a version over a second old, long after Run subscribed), and there
// is no other caller. A worker that ran tasks without Run would never
// hear a flush request, and the pusher would wait its flushWait per gap.
func (w *Worker) subscribeFlush() (*nats.Subscription, error) {
	sub, err := w.cfg.Store.JetStream().Conn().Subscribe(w.cfg.Store.Names().FlushSubject(w.cfg.NodeID), func(m *nats.Msg) {
		w.mu.Lock()
		out := w.outputs[string(m.Data)]
		w.mu.Unlock()
		if out != nil {
			out.writeNow()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("worker: subscribe to flush requests: %w", err)
	}
	return sub, nil
}

// tracked makes task id's running attempt, writing through out, answer
// flush requests until untrack is called.
func (w *Worker) tracked(id string, out *coalescer) (untrack func()) {
	w.mu.Lock()
	w.outputs[id] = out
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.outputs[id] == out {
			delete(w.outputs, id)
		}
	}
}
