package serve

import (
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pusher"
)

// outputInterval is worker.output_interval, or by default the pusher's
// progress gap at push.budget and a tenth (3.7 s at 20/min): a version
// is written only when the pusher can show it. Each version reaches the
// pusher (its output watch) a gap or more after the frame before, so it
// goes at once: the text a frame shows was written milliseconds before.
// At half a gap (the default until issue 28) every other version was
// never shown, and each costs a replicated write, its ack and a watch
// delivery: the output bucket is an answer's largest JetStream cost.
func outputInterval(cfg config.Config) time.Duration {
	if cfg.Worker.OutputInterval > 0 {
		return cfg.Worker.OutputInterval
	}
	gap := pusher.ProgressGap(cfg.Push.Budget)
	return gap + gap/10
}
