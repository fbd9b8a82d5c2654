package serve

import (
	"github.com/botctl/botctl/pkg/bots"

	"github.com/prometheus/client_golang/prometheus"
)

// What a node shows of a bot's override it refused (pkg/bots): a warning
// in /readyz, which leaves the node ready (the bot is served, with the
// settings it had), and a gauge per bot. GET /status has the reason too
// (bots.View), and botctl status shows it.

// descSettingsRefused is botctl_bot_settings_refused.
var descSettingsRefused = desc("bot_settings_refused", "1 while the bot's latest settings override in etcd (botctl bots set) is refused by this node, which serves the bot with the settings it had (at start: the config file's); else 0.", "bot")

// settingsCollector exposes botctl_bot_settings_refused for every bot the
// file or etcd names.
type settingsCollector struct{ b *bots.Live }

func (c settingsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descSettingsRefused }

func (c settingsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.b == nil {
		return
	}
	for bot, v := range c.b.Views() {
		ch <- prometheus.MustNewConstMetric(descSettingsRefused, prometheus.GaugeValue, b2f(v.RefusedRevision != 0), bot)
	}
}
