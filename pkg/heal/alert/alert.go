package alert

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/heal/incident"
)

// Kind is what an alert says. The set is closed; receivers switch on it.
type Kind string

const (
	// KindOpen: one instance has an incident (one per incident).
	KindOpen Kind = "open"
	// KindRecovered: the instance(s) named are back (incident Recovered
	// set, or closed).
	KindRecovered Kind = "recovered"
	// KindEscalated: an automatic recovery still fails after
	// Config.EscalateAfter; always level human.
	KindEscalated Kind = "escalated"
	// KindMerged: several instances went down within Config.Window; one
	// alert for all of them, always level human, CommonCause set.
	KindMerged Kind = "merged"
	// KindFlapping: incidents of a bot folded during its flap window
	// (Config.FlapWindow), summarized once at the window's end.
	KindFlapping Kind = "flapping"
	// KindSynthetic: the scheduled test of the whole alert path.
	KindSynthetic Kind = "synthetic"
)

// Alert is what every sink receives; the JSON webhook posts it as is
// (docs/alerts.md documents the shape, other tools rely on it).
type Alert struct {
	// ID is deterministic (kind and the first incident, or the schedule
	// slot for a synthetic alert): a receiver can deduplicate on it.
	ID        string         `json:"id"`
	Kind      Kind           `json:"kind"`
	Level     incident.Level `json:"level"`
	At        time.Time      `json:"at"`
	Instances []Instance     `json:"instances"` // never null; empty for a synthetic alert
	Summary   string         `json:"summary"`
	// NextAction is what to do now: the incident's own Next, or the
	// default for its signal (DefaultNext).
	NextAction string `json:"next_action"`
	// CommonCause is set on merged alerts only.
	CommonCause string `json:"common_cause,omitempty"`
}

// Instance is one bot an alert is about.
type Instance struct {
	Bot             string `json:"bot"`
	Owner           string `json:"owner"`
	Incident        string `json:"incident"`
	Signal          string `json:"signal"`
	Reason          string `json:"reason"`
	DowntimeSeconds int64  `json:"downtime_seconds"`
}

// humanSignals page a person at once: botctl cannot fix them.
var humanSignals = map[string]bool{
	incident.SignalAuth:     true,
	incident.SignalGate:     true,
	incident.SignalDelivery: true,
	incident.SignalBackfill: true,
	incident.SignalCorrupt:  true,
}

// NeedsHuman reports whether inc must page a person at once: its level is
// human, or its signal is one only a person can fix (auth, env_gate,
// delivery, backfill) whatever level the detector wrote.
func NeedsHuman(inc *incident.Incident) bool {
	return inc.Level == incident.Human || humanSignals[inc.Signal]
}

// defaultNext is the next action per signal when the incident has none:
// for an operator, concrete.
var defaultNext = map[string]string{
	incident.SignalConnection: "None yet: botctl reconnects by itself. If it is still down in a few minutes, check the node's egress to WeCom (openws.work.weixin.qq.com:443) and `botctl status`.",
	incident.SignalProbe:      "None yet: botctl reconnects after missed heartbeats. If it repeats, check latency and packet loss from the node to WeCom and the node's load.",
	incident.SignalOutbound:   "None yet: botctl retries replies and pushes. If failures continue, check the errcodes in the node's log (field bot) and the bot's per-conversation quota.",
	incident.SignalSilence:    "None yet: botctl probes and reconnects. If the bot is connected but silent, check in the WeCom admin console that the bot is enabled and visible to its users.",
	incident.SignalTakeover:   "None yet: a new leader holds the bot. Find out why the previous node vanished (crash, OOM, network): `botctl status` and its system log.",
	incident.SignalAuth:       "Get the bot's current secret from the WeCom admin console (智能机器人 → API 配置), put it in the bot's secret_file or $BOTCTL_BOT_<ID>_SECRET, restart or reload botctl. botctl stopped retrying with the rejected one.",
	incident.SignalGate:       "Another environment uses this bot's credentials. Decide which environment owns the bot, stop the other one's use of it, then `botctl bots gate --bot <ID> --env <NAME>` if the gate must move.",
	incident.SignalDelivery:   "A final answer could not be delivered. Tell the user(s) named in the incident, then acknowledge it: `botctl incidents ack <INCIDENT>`.",
	incident.SignalBackfill:   "Messages missed during the outage could not be answered. Reply to the conversations marked \"may be incomplete\" in the incident, then `botctl incidents ack <INCIDENT>`.",
	incident.SignalCorrupt:    "A task record does not decode and is skipped: its user got no answer. Look at the tasks named in the incident, remove or replace their records in the tasks bucket, then `botctl incidents ack <INCIDENT>`.",

	incident.SignalRouteSilence: "None yet: botctl resubscribes on a fresh connection once. If the group stays silent, check in WeCom that the bot is still a member of the group named in the incident and that messages there mention it.",
}

// DefaultNext is the next action written on alerts about an incident of
// signal that has no Next of its own.
func DefaultNext(signal string) string {
	if s, ok := defaultNext[signal]; ok {
		return s
	}
	return "Look at the incident (`botctl incidents show <INCIDENT>`) and the node's log for the bot."
}

// commonCause is the hint on a merged alert.
const commonCause = "Several bots went down together: a common cause is likely: the nodes' egress network to WeCom, a deploy, or a credential or config change."

// mergedNext is the next action on a merged alert.
const mergedNext = "Look for what the bots share before looking at any one of them: the nodes' egress to openws.work.weixin.qq.com:443, the latest deploy (roll back if it coincides), recent changes to secrets or config; `botctl status` shows which nodes hold which bots."

// nextFor is the next action for one incident.
func nextFor(inc *incident.Incident) string {
	next := inc.Next
	if next == "" {
		next = DefaultNext(inc.Signal)
	}
	return strings.ReplaceAll(next, "<INCIDENT>", inc.ID)
}

// joinNext is the next action of an alert about several incidents: each
// distinct action once, prefixed with the bots it is for.
func joinNext(incs []*incident.Incident) string {
	if len(incs) == 1 {
		return nextFor(incs[0])
	}
	var order []string
	bots := map[string][]string{}
	for _, inc := range incs {
		n := nextFor(inc)
		if _, ok := bots[n]; !ok {
			order = append(order, n)
		}
		if !slices.Contains(bots[n], inc.Bot) {
			bots[n] = append(bots[n], inc.Bot)
		}
	}
	if len(order) == 1 {
		return order[0]
	}
	parts := make([]string, len(order))
	for k, n := range order {
		parts[k] = fmt.Sprintf("%s: %s", strings.Join(bots[n], ", "), n)
	}
	return strings.Join(parts, " | ")
}
