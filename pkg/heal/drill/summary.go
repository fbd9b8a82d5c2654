package drill

import (
	"time"

	"github.com/botctl/botctl/pkg/heal/incident"
)

// Summary sums up rounds.
type Summary struct {
	Rounds int             `json:"rounds"`
	Failed int             `json:"failed"` // rounds that did not complete (Error set)
	T1     incident.Spread `json:"t1"`
	T2     incident.Spread `json:"t2"`
	// T2Auto and T2Human are T2 split as `botctl incidents report` splits
	// it: over the rounds whose incident botctl acted on first, and over
	// those a person acknowledged.
	T2Auto  incident.Spread `json:"t2_auto"`
	T2Human incident.Spread `json:"t2_human"`
	T3      incident.Spread `json:"t3"`
	Sent    int             `json:"sent"`
	Lost    int             `json:"lost"`
	Alerts  int             `json:"alerts"`
}

// Summarize sums up rounds (times over the rounds that completed).
func Summarize(rounds []Round) Summary {
	s := Summary{Rounds: len(rounds)}
	var t1, t2, t3, t2a, t2h []time.Duration
	sec := func(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }
	for _, r := range rounds {
		s.Sent += r.Sent
		s.Lost += r.Lost
		s.Alerts += r.Alerts
		if r.Error != "" {
			s.Failed++
			continue
		}
		t1, t2, t3 = append(t1, sec(r.T1)), append(t2, sec(r.T2)), append(t3, sec(r.T3))
		if r.T2Auto >= 0 {
			t2a = append(t2a, sec(r.T2Auto))
		}
		if r.T2Human >= 0 {
			t2h = append(t2h, sec(r.T2Human))
		}
	}
	s.T1, s.T2, s.T3 = incident.SpreadOf(t1), incident.SpreadOf(t2), incident.SpreadOf(t3)
	s.T2Auto, s.T2Human = incident.SpreadOf(t2a), incident.SpreadOf(t2h)
	return s
}
