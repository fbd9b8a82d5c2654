package incident

import (
	"slices"
	"time"
)

// Report sums up one bot's incidents: the distributions of T1, T2 and T3,
// how many healed without a person, and the downtime.
type Report struct {
	Bot       string `json:"bot"`
	Incidents int    `json:"incidents"`
	Open      int    `json:"open"`
	Outages   int    `json:"outages"`
	// T1, T2, T3 over the incidents that have them, in seconds.
	T1 Spread `json:"t1"`
	T2 Spread `json:"t2"`
	T3 Spread `json:"t3"`
	// SelfHealRate is closed without a person / all (open ones count as not
	// healed yet). 1 when there are none.
	SelfHealRate float64 `json:"self_heal_rate"`
	SelfHealed   int     `json:"self_healed"`
	// DowntimeSeconds is the outages' total (an open one up to now).
	DowntimeSeconds float64 `json:"downtime_seconds"`
}

// Spread is a median and a 90th percentile, in seconds, over N values.
type Spread struct {
	N      int     `json:"n"`
	Median float64 `json:"median_s"`
	P90    float64 `json:"p90_s"`
	Max    float64 `json:"max_s"`
}

// SpreadOf is the median, p90 and max of ds (nearest rank).
func SpreadOf(ds []time.Duration) Spread {
	if len(ds) == 0 {
		return Spread{}
	}
	slices.Sort(ds)
	q := func(p float64) float64 {
		// Nearest rank: the value at or above the p-th fraction.
		i := int(float64(len(ds))*p+0.999999) - 1
		i = max(0, min(i, len(ds)-1))
		return ds[i].Seconds()
	}
	return Spread{N: len(ds), Median: q(0.5), P90: q(0.9), Max: ds[len(ds)-1].Seconds()}
}

// Summarize reports per bot, sorted by bot.
func Summarize(all []Incident, now time.Time) []Report {
	by := map[string][]Incident{}
	for _, i := range all {
		by[i.Bot] = append(by[i.Bot], i)
	}
	bots := make([]string, 0, len(by))
	for b := range by {
		bots = append(bots, b)
	}
	slices.Sort(bots)
	var out []Report
	for _, b := range bots {
		r := Report{Bot: b}
		var t1, t2, t3 []time.Duration
		var down time.Duration
		for _, i := range by[b] {
			r.Incidents++
			if i.State != Closed {
				r.Open++
			} else if i.Method == MethodAuto {
				r.SelfHealed++
			}
			if i.Kind == Outage {
				r.Outages++
				down += i.Downtime(now)
			}
			if !i.Dropped.IsZero() && !i.Detected.IsZero() {
				t1 = append(t1, i.T1())
			}
			if !i.FirstAction.IsZero() {
				t2 = append(t2, i.T2())
			}
			if !i.DataComplete.IsZero() && !i.Recovered.IsZero() {
				t3 = append(t3, i.T3())
			}
		}
		r.T1, r.T2, r.T3 = SpreadOf(t1), SpreadOf(t2), SpreadOf(t3)
		r.SelfHealRate = 1
		if r.Incidents > 0 {
			r.SelfHealRate = float64(r.SelfHealed) / float64(r.Incidents)
		}
		r.DowntimeSeconds = down.Seconds()
		out = append(out, r)
	}
	return out
}
