package election

import (
	"context"
	"time"

	"github.com/botctl/botctl/pkg/clock"
)

// A frozen etcd member (a stopped process, a link that drops packets)
// keeps its connection "ready" until the client's gRPC keepalive leaves it,
// about 15 s (pkg/config's EtcdKeepAliveTime and EtcdKeepAliveTimeout);
// meanwhile every request the round-robin balancer gives it waits for its
// own deadline. A term cannot afford that for its renewals (the renewal
// deadline, 15 s) or its pulses (a standby deposes after 3 s without one).
// So each of those requests is hedged: sent once more, beside the first,
// once the first has gone HedgeAfter unanswered. The balancer picks
// another member for the second. The first is not abandoned: on a cluster
// that is merely slow it is the one that lands. Both are idempotent (a
// lease probe; a pulse compared on the term's key).

// hedgeAttempts bounds the attempts of one hedged request: the first,
// one after HedgeAfter, and one more if one of them fails while the other
// is still out (a member that refuses at once, another that hangs).
const hedgeAttempts = 3

// hedge runs try, and again beside it each time after passes without an
// answer or an attempt fails while another is still out, up to
// hedgeAttempts in all. It returns the first success, or the last error
// once no attempt is out and none may start (a first attempt that fails
// before after is returned as it is: the caller's own retry decides).
// try must return when its context ends; the others' contexts end when
// hedge returns.
func hedge[T any](ctx context.Context, clk clock.Clock, after time.Duration, try func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	results := make(chan result, hedgeAttempts) // buffered: losers never block
	started, out := 0, 0
	start := func() {
		started++
		out++
		go func() {
			v, err := try(ctx)
			results <- result{v, err}
		}()
	}
	start()
	timer := clk.NewTimer(after)
	defer timer.Stop()
	for {
		select {
		case <-timer.C():
			if started < hedgeAttempts {
				start()
				timer.Reset(after)
			}
		case r := <-results:
			out--
			switch {
			case r.err == nil:
				return r.v, nil
			case out > 0 && started < hedgeAttempts:
				start() // one failed while another hangs: try a third member
			case out == 0:
				return r.v, r.err
			}
		}
	}
}
