package serve

import (
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/heal/recovery"
)

// healthConfig is the health monitor's configuration from the node's.
func (n *Node) healthConfig() health.Config {
	cfg := n.cfg
	owners := map[string]string{}
	for _, b := range cfg.Bots {
		if b.Owner != "" {
			owners[b.ID] = b.Owner
		}
	}
	h, r := cfg.Health, cfg.Recovery
	return health.Config{
		NodeID: cfg.NodeID, Owners: owners,
		Limits: health.BaselineLimits{Factor: h.SilenceFactor, Floor: h.SilenceFloor, MinWatched: h.SilenceMinWatched,
			MinEvents: float64(h.SilenceMinEvents)},
		RecordInterval: h.RecordInterval, ProbeTimeout: h.ProbeTimeout, ProbeEvery: h.ProbeEvery, Refute: h.Refute,
		StatusLineEvery: cfg.Push.Heartbeat, StreamWindow: cfg.Push.StreamWindow,
		Recovery: recovery.Config{Threshold: r.Threshold, Probes: r.Probes, ProbeInterval: r.ProbeInterval,
			Canary: r.CanaryChat, CanaryGroup: r.CanaryGroup, Observe: r.Observe, DrainFactor: r.DrainFactor},
		Backfill: n.backfill,
		Overlap:  cfg.Backfill.Overlap,
		Metrics:  n.obs.metrics,
		Logger:   n.log,
	}
}
