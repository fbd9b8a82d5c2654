package serve

import (
	"fmt"
	"sort"

	"github.com/botctl/botctl/pkg/redact"
	"github.com/prometheus/client_golang/prometheus"
)

// What a node shows of a bot's override it refused (bots.go): a warning
// in /readyz, which leaves the node ready (the bot is served, with the
// settings it had), and a gauge per bot. GET /status has the reason too
// (settingsView), and botctl status shows it.

// descSettingsRefused is botctl_bot_settings_refused.
var descSettingsRefused = desc("bot_settings_refused", "1 while the bot's latest settings override in etcd (botctl bots set) is refused by this node, which serves the bot with the settings it had (at start: the config file's); else 0.", "bot")

// settingsCollector exposes botctl_bot_settings_refused for every bot the
// file or etcd names.
type settingsCollector struct{ b *bots }

func (c settingsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descSettingsRefused }

func (c settingsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.b == nil {
		return
	}
	for bot, v := range c.b.views() {
		ch <- prometheus.MustNewConstMetric(descSettingsRefused, prometheus.GaugeValue, b2f(v.RefusedRevision != 0), bot)
	}
}

// warnings are /readyz's lines for the overrides this node refuses, one
// per bot, sorted. The reason names a config key, never a secret; it is
// redacted all the same, /readyz asking for no token.
func (b *bots) warnings() []string {
	if b == nil {
		return nil
	}
	var out []string
	for bot, v := range b.views() {
		if v.RefusedRevision == 0 {
			continue
		}
		runs := "the config file's settings"
		if v.Revision != 0 {
			runs = fmt.Sprintf("the override of revision %d it had", v.Revision)
		}
		out = append(out, fmt.Sprintf("bot %s: its settings override in etcd (revision %d) is refused by this node: %s; the bot is served with %s (botctl bots show --bot %s; fix or clear the override)",
			bot, v.RefusedRevision, redact.String(v.Refused), runs, bot))
	}
	sort.Strings(out)
	return out
}
