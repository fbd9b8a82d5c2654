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
	// T1, T2, T3 over the incidents that have them, in seconds. T2 is
	// every first action together; T2Auto is detected → the first
	// automatic step (the incidents botctl acted on first), T2Human
	// detected → a person's first acknowledgement (the incidents acked,
	// whether or not botctl acted before).
	T1      Spread `json:"t1"`
	T2      Spread `json:"t2"`
	T2Auto  Spread `json:"t2_auto"`
	T2Human Spread `json:"t2_human"`
	T3      Spread `json:"t3"`
	// SelfHealRate is closed without a person / all (open ones count as not
	// healed yet). 1 when there are none.
	SelfHealRate float64 `json:"self_heal_rate"`
	SelfHealed   int     `json:"self_healed"`
	// SelfHealMonth is the self-heal rate over the incidents detected in
	// the Month before now, whatever the report's since (1 when there are
	// none); MonthIncidents and MonthSelfHealed are its counts.
	SelfHealMonth   float64 `json:"self_heal_rate_month"`
	MonthIncidents  int     `json:"month_incidents"`
	MonthSelfHealed int     `json:"month_self_healed"`
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

// Month is the window of Report.SelfHealMonth: the design's self-heal
// rate is over a month.
const Month = 30 * 24 * time.Hour

// Summarize reports per bot, sorted by bot: the spreads, counts and
// downtime over the incidents detected at or after since (zero: all of
// them), the month's self-heal rate over those detected within Month
// before now. all should hold both.
func Summarize(all []Incident, since, now time.Time) []Report {
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
		out = append(out, summarizeBot(b, by[b], since, now))
	}
	return out
}

func summarizeBot(bot string, list []Incident, since, now time.Time) Report {
	r := Report{Bot: bot}
	var t1, t2, t2a, t2h, t3 []time.Duration
	var down time.Duration
	monthFrom := now.Add(-Month)
	for _, i := range list {
		healed := i.State == Closed && i.Method == MethodAuto
		if !i.Detected.Before(monthFrom) {
			r.MonthIncidents++
			if healed {
				r.MonthSelfHealed++
			}
		}
		if i.Detected.Before(since) {
			continue
		}
		r.Incidents++
		if i.State != Closed {
			r.Open++
		} else if healed {
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
		if d, ok := i.T2Auto(); ok {
			t2a = append(t2a, d)
		}
		if d, ok := i.T2Human(); ok {
			t2h = append(t2h, d)
		}
		if !i.DataComplete.IsZero() && !i.Recovered.IsZero() {
			t3 = append(t3, i.T3())
		}
	}
	r.T1, r.T2, r.T2Auto, r.T2Human, r.T3 = SpreadOf(t1), SpreadOf(t2), SpreadOf(t2a), SpreadOf(t2h), SpreadOf(t3)
	rate := func(healed, n int) float64 {
		if n == 0 {
			return 1
		}
		return float64(healed) / float64(n)
	}
	r.SelfHealRate, r.SelfHealMonth = rate(r.SelfHealed, r.Incidents), rate(r.MonthSelfHealed, r.MonthIncidents)
	r.DowntimeSeconds = down.Seconds()
	return r
}
