package serve

import (
	"context"
	"os"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/skew"
	"github.com/prometheus/client_golang/prometheus"
)

// watchSkew measures this node's clock against JetStream's every minute
// (pkg/skew) until ctx ends, in the health bucket under clock.<node>:
// while it is more than nats.max_clock_skew off, the node campaigns for
// no bot and its worker fetches no task; /readyz and the log say why.
func (n *Node) watchSkew(ctx context.Context, store *jetstream.Store) {
	n.skew.Probe = skew.Probe{KV: store.Health(), Key: "clock." + jetstream.EncodeToken(n.cfg.NodeID)}
	if v := os.Getenv(TestClockOffsetEnv); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			n.log.Warn().Dur("offset", d).Msg("$" + TestClockOffsetEnv + " set: the clock probe reads this node's clock shifted (a test of the clock check; never set it in production)")
			n.skew.Probe.Now = func() time.Time { return time.Now().Add(d) }
		}
	}
	n.skew.Run(ctx, func(r skew.Reading, off bool) {
		if off {
			why, _ := n.skew.Off()
			n.log.Error().Dur("offset", r.Offset).Dur("uncertainty", r.Uncertainty).Msg(why)
			return
		}
		n.log.Info().Dur("offset", r.Offset).Msg("this node's clock is within nats.max_clock_skew of JetStream's again")
	})
}

// TestClockOffsetEnv, if set to a duration, shifts the clock this node's
// clock probe reads by it, and nothing else: a node "40 minutes off" for
// the chaos suite's clock-skew scenario, since one process cannot be
// given a wall clock of its own. Tests only.
const TestClockOffsetEnv = "BOTCTL_TEST_CLOCK_OFFSET"

var descClockOffset = desc("clock_offset_seconds", "JetStream's clock minus this node's, last measured (positive: this node is behind); past nats.max_clock_skew the node leads nothing and runs no task.")

// skewCollector is the clock's reading in /metrics (none before the first).
type skewCollector struct{ w *skew.Watch }

func (c skewCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descClockOffset }

func (c skewCollector) Collect(ch chan<- prometheus.Metric) {
	if c.w == nil {
		return
	}
	r := c.w.Reading()
	if r.At.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(descClockOffset, prometheus.GaugeValue, r.Offset.Seconds())
}
