package serve

import (
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pusher"
)

// outputInterval is worker.output_interval, or by default half the
// pusher's progress gap at push.budget (1.7 s at 20/min). A frame shows
// the latest version written: at half a gap a frame that the
// conversation's send budget held back still finds a version at most half
// a gap old. At the gap and a tenth (3.7 s, tried in issue 28) the
// writes halved and the push lag fell in the ramp (p99 455 → 55 ms at
// 1,000 conversations), but in the chaos suite's busy conversations,
// where frames are often held back, the lag's p99 rose from 1.7 s to
// 3.5 s, over the 3 s target (bench/chaos-freeze-nats.md): the target
// wins; worker.output_interval: 3.7s trades it for the writes.
func outputInterval(cfg config.Config) time.Duration {
	if cfg.Worker.OutputInterval > 0 {
		return cfg.Worker.OutputInterval
	}
	return pusher.ProgressGap(cfg.Push.Budget) / 2
}
