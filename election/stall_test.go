package election

import (
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
)

// The standby's decision, step by step on the fake clock, for both kinds
// of pulse: a node record (Rev moves every interval whatever the term
// does; N is the term's counter) and a per-bot key (N is its ModRevision).
func TestStallDecision(t *testing.T) {
	const (
		timeout  = 3 * time.Second
		interval = time.Second
	)
	type step struct {
		after time.Duration // clock step before this one
		sight *pulseSeen    // observed from the watch, if set
		moved bool          // observe's answer
		// read, if set, is a confirming read taking rtt, and want its
		// verdict.
		read *pulseSeen
		rtt  time.Duration
		want verdict
		due  time.Duration // due() after the step
	}
	seen := func(at, rev, n int64) *pulseSeen { return &pulseSeen{At: at, Rev: rev, N: n} }
	cases := []struct {
		name  string
		first pulseSeen
		steps []step
	}{
		{"node record moves, term's counter stands still: depose on the read's record revision", pulseSeen{At: 10, Rev: 10, N: 5}, []step{
			{after: time.Second, sight: seen(11, 11, 5), due: 2 * time.Second},
			{after: time.Second, sight: seen(12, 12, 5), due: time.Second},
			{after: time.Second, sight: seen(13, 13, 5), due: 0},
			{read: seen(14, 14, 5), rtt: 10 * time.Millisecond, want: depose},
		}},
		{"the term's counter moves: the window starts again", pulseSeen{At: 10, Rev: 10, N: 5}, []step{
			{after: 2 * time.Second, sight: seen(11, 11, 6), moved: true, due: timeout},
			{after: 2 * time.Second, sight: seen(12, 12, 6), due: time.Second},
			{read: seen(12, 12, 6), want: notYet, due: time.Second},
		}},
		{"the whole node stops: no sight at all, the read confirms", pulseSeen{At: 10, Rev: 10, N: 5}, []step{
			{after: timeout, due: 0},
			{read: seen(40, 10, 5), rtt: time.Millisecond, want: depose},
		}},
		{"the watch lagged: the read shows a counter that moved", pulseSeen{At: 10, Rev: 10, N: 5}, []step{
			{after: timeout, due: 0},
			{read: seen(20, 14, 9), want: lagged, due: 0},
		}},
		{"a slow read is no evidence", pulseSeen{At: 10, Rev: 10, N: 5}, []step{
			{after: timeout + time.Second, due: -time.Second},
			{read: seen(20, 10, 5), rtt: interval + time.Millisecond, want: slowRead},
		}},
		{"an older sight changes nothing", pulseSeen{At: 20, Rev: 20, N: 5}, []step{
			{after: time.Second, sight: seen(19, 19, 4), due: 2 * time.Second},
			{after: 2 * time.Second, read: seen(21, 21, 5), want: depose},
		}},
		{"the term's entry is gone (N 0): not a move", pulseSeen{At: 10, Rev: 10, N: 5}, []step{
			{after: time.Second, sight: seen(11, 11, 0), due: 2 * time.Second},
			{after: 2 * time.Second, read: seen(12, 12, 0), want: depose},
		}},
		{"per-bot key: each pulse of the leader's lease is a move", pulseSeen{At: 7, Rev: 7, N: 7}, []step{
			{after: 900 * time.Millisecond, sight: seen(8, 8, 8), moved: true, due: timeout},
			{after: timeout, sight: nil, due: 0},
			{read: seen(30, 8, 8), want: depose},
		}},
		{"per-bot key deleted since the last sight: lagged, as 0.5.0 decides", pulseSeen{At: 7, Rev: 7, N: 7}, []step{
			{after: timeout, due: 0},
			{read: seen(30, 0, 0), want: lagged},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeclock.New(time.Unix(1e9, 0))
			st := newStall(c.Now(), tc.first, timeout, interval)
			for i, s := range tc.steps {
				c.Step(s.after)
				if s.sight != nil {
					if got := st.observe(c.Now(), *s.sight); got != s.moved {
						t.Fatalf("step %d: observe moved = %v, want %v", i, got, s.moved)
					}
				}
				if s.read != nil {
					if got := st.confirm(c.Now(), *s.read, s.rtt); got != s.want {
						t.Fatalf("step %d: confirm = %v, want %v", i, got, s.want)
					}
					if s.want == depose && st.seen != *s.read {
						t.Fatalf("step %d: deposing on %+v, want the read's %+v", i, st.seen, *s.read)
					}
					if s.want != notYet && s.want != depose {
						st.restart(c.Now())
					}
					continue
				}
				if got := st.due(c.Now()); got != s.due {
					t.Fatalf("step %d: due = %v, want %v", i, got, s.due)
				}
			}
		})
	}
}
