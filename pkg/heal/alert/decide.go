package alert

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/heal/incident"
)

// staleAfter: an incident closed longer ago than this when first seen is
// history, not news (an alerter deployed on a bucket with 90 days of
// incidents must not page for them). It still anchors flap windows.
const staleAfter = time.Hour

// plan is one alert decided: its kind, level, id and incidents.
type plan struct {
	kind   Kind
	level  incident.Level
	id     string
	incs   []*incident.Incident
	since  time.Time // flapping: start of the folded window
	streak time.Time // flapping: since when the bot has been flapping
}

func sentAt(inc *incident.Incident, kinds ...Kind) (time.Time, bool) {
	for _, s := range inc.Alerts {
		if slices.Contains(kinds, Kind(s.Kind)) {
			return s.At, true
		}
	}
	return time.Time{}, false
}

func alerted(inc *incident.Incident, kinds ...Kind) bool {
	_, ok := sentAt(inc, kinds...)
	return ok
}

// openAlerted: the incident's instance was alerted as down (its own
// alert or a merged one).
func openAlerted(inc *incident.Incident) bool { return alerted(inc, KindOpen, KindMerged) }

func recovered(inc *incident.Incident) bool {
	return !inc.Recovered.IsZero() || inc.State == incident.Closed
}

// healed: an automatic incident recovered before any alert named it
// (its open waits for the merge window; escalation needs it still down).
func healed(inc *incident.Incident) bool {
	return !NeedsHuman(inc) && recovered(inc) && !alerted(inc, KindOpen, KindMerged, KindEscalated)
}

func stale(inc *incident.Incident, now time.Time) bool {
	return inc.State == incident.Closed && !inc.Closed.IsZero() && now.Sub(inc.Closed) > staleAfter
}

// decide is every rule, applied to the incidents known at now. It is a
// function of the incidents and their recorded alerts only, so a new
// alerter rebuilds its state from the bucket and decides the same.
//
// Order: opens (human at once, auto after the merge window if still down:
// an automatic incident healed by then sends nothing), escalations,
// flapping summaries, recoveries.
func decide(now time.Time, cfg *Config, all map[string]*incident.Incident) []plan {
	byBot := map[string][]*incident.Incident{}
	for _, inc := range all {
		byBot[inc.Bot] = append(byBot[inc.Bot], inc)
	}
	bots := make([]string, 0, len(byBot))
	for b, list := range byBot {
		bots = append(bots, b)
		slices.SortFunc(list, func(x, y *incident.Incident) int {
			return cmp.Or(x.Detected.Compare(y.Detected), strings.Compare(x.ID, y.ID))
		})
	}
	slices.Sort(bots)

	var opens, flaps []plan
	var candidates []*incident.Incident // auto, waiting for the merge window
	for _, bot := range bots {
		o, c, f := walkBot(now, cfg, byBot[bot])
		opens, candidates, flaps = append(opens, o...), append(candidates, c...), append(flaps, f...)
	}
	opens = mergeHuman(cfg, opens)
	opens = append(opens, mergeWindows(now, cfg, candidates)...)

	var escalate, back []*incident.Incident
	for _, bot := range bots {
		for _, inc := range byBot[bot] {
			if stale(inc, now) {
				continue
			}
			if !NeedsHuman(inc) && !recovered(inc) && !alerted(inc, KindEscalated) && now.Sub(inc.Detected) >= cfg.EscalateAfter {
				escalate = append(escalate, inc)
			}
			if recovered(inc) && alerted(inc, KindOpen, KindMerged, KindEscalated) && !alerted(inc, KindRecovered) {
				back = append(back, inc)
			}
		}
	}
	escalate = withMergedPeers(cfg, all, escalate)
	plans := opens
	if len(escalate) > 0 {
		plans = append(plans, plan{kind: KindEscalated, level: incident.Human, id: "escalated-" + escalate[0].ID, incs: escalate})
	}
	plans = append(plans, flaps...)
	if len(back) > 0 {
		level := incident.Auto
		for _, inc := range back {
			for _, s := range inc.Alerts {
				if s.Level == incident.Human {
					level = incident.Human // tell the people paged that it is over
				}
			}
		}
		plans = append(plans, plan{kind: KindRecovered, level: level, id: "recovered-" + back[0].ID, incs: back})
	}
	return plans
}

// walkBot applies the flap rule to one bot's incidents (oldest first):
// the first incident opens a flap window of FlapWindow from its
// detection; further auto incidents detected within it are folded, and
// summarized in one flapping alert when it ends; the summary opens the
// next window. It returns the human opens due now, the auto incidents
// waiting for the merge window, and the flapping summaries due now.
func walkBot(now time.Time, cfg *Config, list []*incident.Incident) (opens []plan, candidates []*incident.Incident, flaps []plan) {
	var anchor, streak time.Time // current flap window start; first window of the chain
	var folded []*incident.Incident
	closeWindow := func() {
		if len(folded) > 0 {
			due := anchor.Add(cfg.FlapWindow)
			if !now.Before(due) {
				level := incident.Auto
				if now.Sub(streak) >= cfg.EscalateAfter {
					level = incident.Human // flapping that long: recovery is not holding
				}
				flaps = append(flaps, plan{kind: KindFlapping, level: level, id: "flapping-" + folded[0].ID, incs: folded, since: anchor, streak: streak})
			}
		}
		folded = nil
	}
	inWindow := func(t time.Time) bool { return !anchor.IsZero() && t.Before(anchor.Add(cfg.FlapWindow)) }
	for _, inc := range list {
		if at, ok := sentAt(inc, KindFlapping); ok {
			// Summarized: the summary opened the next window.
			if at.After(anchor) {
				if len(folded) > 0 && !inWindow(at) {
					closeWindow()
				}
				anchor = at
			}
			continue
		}
		if !inWindow(inc.Detected) {
			closeWindow()
			if openAlerted(inc) || NeedsHuman(inc) || !stale(inc, now) {
				anchor, streak = inc.Detected, inc.Detected
			}
		} else if !openAlerted(inc) && !NeedsHuman(inc) {
			if !stale(inc, now) {
				folded = append(folded, inc)
			}
			continue
		}
		switch {
		case openAlerted(inc) || stale(inc, now):
		case NeedsHuman(inc):
			opens = append(opens, plan{kind: KindOpen, level: incident.Human, id: "open-" + inc.ID, incs: []*incident.Incident{inc}})
		case healed(inc):
			// A blip that healed before anything was said about it is
			// noise: no open, and so no recovered. It still anchors the
			// bot's flap window, so repeated blips are summarized.
		default:
			candidates = append(candidates, inc)
		}
	}
	closeWindow()
	return opens, candidates, flaps
}

// mergeWindows groups the waiting auto incidents: from the earliest, all
// detected within Window of it form a group, decided once Window has
// passed: MergeMin or more bots make one merged alert, fewer an open
// alert each.
func mergeWindows(now time.Time, cfg *Config, candidates []*incident.Incident) []plan {
	slices.SortFunc(candidates, func(x, y *incident.Incident) int {
		return cmp.Or(x.Detected.Compare(y.Detected), strings.Compare(x.ID, y.ID))
	})
	var plans []plan
	for len(candidates) > 0 {
		end := candidates[0].Detected.Add(cfg.Window)
		if now.Before(end) {
			break // still open for others to join
		}
		n := 0
		bots := map[string]bool{}
		for n < len(candidates) && candidates[n].Detected.Before(end) {
			bots[candidates[n].Bot] = true
			n++
		}
		group := candidates[:n:n]
		candidates = candidates[n:]
		if len(bots) >= cfg.MergeMin {
			plans = append(plans, plan{kind: KindMerged, level: incident.Human, id: "merged-" + group[0].ID, incs: group})
			continue
		}
		for _, inc := range group {
			plans = append(plans, plan{kind: KindOpen, level: incident.Auto, id: "open-" + inc.ID, incs: []*incident.Incident{inc}})
		}
	}
	return plans
}

// alert renders p at now.
func (p plan) alert(now time.Time, cfg *Config) Alert {
	a := Alert{ID: p.id, Kind: p.kind, Level: p.level, At: now, Instances: make([]Instance, 0, len(p.incs))}
	if a.Level == "" {
		a.Level = incident.Auto
	}
	var names []string
	for _, inc := range p.incs {
		a.Instances = append(a.Instances, Instance{
			Bot: inc.Bot, Owner: cfg.owner(inc.Bot, inc.Owner), Incident: inc.ID, Signal: inc.Signal,
			Reason: inc.Reason, DowntimeSeconds: int64(inc.Downtime(now) / time.Second),
		})
		if !slices.Contains(names, inc.Bot) {
			names = append(names, inc.Bot)
		}
	}
	bots := strings.Join(names, ", ")
	first := p.incs[0]
	switch p.kind {
	case KindOpen:
		if first.Kind == incident.Data {
			a.Summary = fmt.Sprintf("bot %s: %s", first.Bot, first.Reason)
		} else {
			a.Summary = fmt.Sprintf("bot %s down: %s (signal %s, detected %s)", first.Bot, first.Reason, first.Signal, first.Detected.UTC().Format(time.RFC3339))
		}
		if a.Level == incident.Human {
			a.Summary += "; a person must act"
		} else {
			a.Summary += "; botctl is fixing it, nobody needs to act yet"
		}
		a.NextAction = nextFor(first)
	case KindMerged:
		a.Summary = fmt.Sprintf("%d bots down within %s: %s", len(names), cfg.Window, bots)
		a.CommonCause = commonCause
		a.NextAction = mergedNext + " Then, per bot: " + joinNext(p.incs)
	case KindEscalated:
		a.Summary = fmt.Sprintf("still down after %s, automatic recovery is not working: %s", cfg.EscalateAfter, bots)
		a.NextAction = "A person must act now. " + joinNext(p.incs)
	case KindFlapping:
		state := "up now"
		if last := p.incs[len(p.incs)-1]; !recovered(last) {
			state = "down now"
		}
		a.Summary = fmt.Sprintf("bot %s is flapping: %d more incidents between %s and %s, %s (flapping since %s)",
			first.Bot, len(p.incs), p.since.UTC().Format(time.RFC3339), p.since.Add(cfg.FlapWindow).UTC().Format(time.RFC3339), state, p.streak.UTC().Format(time.RFC3339))
		a.NextAction = "Find why the connection does not hold: packet loss or an idle timeout (NAT, proxy) between the node and WeCom, the node's load, or another process kicking the bot (errcode 846609 in the log: its credentials are used elsewhere). " +
			"Further incidents are summarized once per " + cfg.FlapWindow.String() + "."
	case KindRecovered:
		var parts []string
		for _, inc := range p.incs {
			switch {
			case inc.Kind == incident.Data:
				parts = append(parts, fmt.Sprintf("%s closed (%s)", inc.Bot, cmp.Or(inc.ActedBy, string(inc.Method), "closed")))
			default:
				parts = append(parts, fmt.Sprintf("%s back after %s", inc.Bot, inc.Downtime(now).Round(time.Second)))
			}
		}
		a.Summary = "recovered: " + strings.Join(parts, "; ")
		a.NextAction = "None: recovered. If it recurs, read the incident's timeline (`botctl incidents show " + first.ID + "`)."
	}
	return a
}

// mergeHuman: human incidents are alerted at once, never held for the
// window; but MergeMin or more bots needing a person in the same
// evaluation (secrets rotated for all bots at once) are one merged alert.
func mergeHuman(cfg *Config, opens []plan) []plan {
	bots := map[string]bool{}
	for _, p := range opens {
		bots[p.incs[0].Bot] = true
	}
	if len(bots) < cfg.MergeMin {
		return opens
	}
	var incs []*incident.Incident
	for _, p := range opens {
		incs = append(incs, p.incs...)
	}
	slices.SortFunc(incs, func(x, y *incident.Incident) int {
		return cmp.Or(x.Detected.Compare(y.Detected), strings.Compare(x.ID, y.ID))
	})
	return []plan{{kind: KindMerged, level: incident.Human, id: "merged-" + incs[0].ID, incs: incs}}
}

// withMergedPeers adds, to the incidents due for escalation, those merged
// with them that are still down: bots that went down together are
// escalated together, once, not one alert per bot a few seconds apart.
func withMergedPeers(cfg *Config, all map[string]*incident.Incident, due []*incident.Incident) []*incident.Incident {
	groups := map[string]bool{}
	for _, inc := range due {
		for _, s := range inc.Alerts {
			if Kind(s.Kind) == KindMerged {
				groups[s.ID] = true
			}
		}
	}
	if len(groups) == 0 {
		return due
	}
	var peers []*incident.Incident
	for _, inc := range all {
		if slices.Contains(due, inc) || NeedsHuman(inc) || recovered(inc) || alerted(inc, KindEscalated) {
			continue
		}
		for _, s := range inc.Alerts {
			if Kind(s.Kind) == KindMerged && groups[s.ID] {
				peers = append(peers, inc)
				break
			}
		}
	}
	out := append(due, peers...)
	slices.SortFunc(out, func(x, y *incident.Incident) int {
		return cmp.Or(x.Detected.Compare(y.Detected), strings.Compare(x.ID, y.ID))
	})
	return out
}
