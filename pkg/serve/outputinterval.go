package serve

import (
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pusher"
)

// outputInterval is worker.output_interval, or by default the pusher's
// progress gap at push.budget and a tenth (3.7 s at 20/min): a running
// answer is written about once per frame the pusher may send. Writes (and
// their watch deliveries) are most of an answer's NATS messages; at half
// the gap (1.7 s, the default until issue 28's flush requests) they were
// twice as many. A frame not held back is sent as its version arrives
// (ramp push lag p99 55 ms at 3.7 s, 455 ms at 1.7 s). A frame that the
// conversation's send budget held back would show a version up to 3.7 s
// old (the chaos suite's push lag p99 rose to 3.5 s, over the 3 s
// target: bench/chaos-freeze-nats.md); the pusher now asks the worker
// for its text first when a version it is about to show is over a
// second old (pkg/pusher's flush.go), so the interval no longer bounds
// what a held frame shows.
func outputInterval(cfg config.Config) time.Duration {
	if cfg.Worker.OutputInterval > 0 {
		return cfg.Worker.OutputInterval
	}
	return pusher.ProgressGap(cfg.Push.Budget) * 11 / 10
}
