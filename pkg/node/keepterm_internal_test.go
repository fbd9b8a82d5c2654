package node

import (
	"errors"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
)

// After a connection of a term ends: reconnect under the same term only
// for a blip (the link, missed heartbeats or acks, the health monitor)
// of a stable connection while the term is valid and the node not
// stopping; anything else goes through the election.
func TestKeepTermOnlyForABlip(t *testing.T) {
	const stable = time.Minute
	blip := leadResult{connected: true, held: 2 * stable, closed: wecom.ReasonNetwork}
	gone := errors.New("gone")
	for _, c := range []struct {
		name          string
		res           leadResult
		termErr, stop error
		want          bool
	}{
		{"network blip", blip, nil, nil, true},
		{"heartbeats lost", leadResult{connected: true, held: stable, closed: wecom.ReasonHeartbeatLost}, nil, nil, true},
		{"acks timed out", leadResult{connected: true, held: stable, closed: wecom.ReasonAckTimeouts}, nil, nil, true},
		{"closed sick by the health monitor", leadResult{connected: true, held: stable, closed: wecom.ReasonUnhealthy}, nil, nil, true},
		{"shorter than stable", leadResult{connected: true, held: stable - time.Second, closed: wecom.ReasonNetwork}, nil, nil, false},
		{"term lost", blip, gone, nil, false},
		{"node stopping", blip, nil, gone, false},
		{"kicked", leadResult{connected: true, held: stable, kicked: true, closed: wecom.ReasonKicked}, nil, nil, false},
		{"no longer subscribed", leadResult{connected: true, held: stable, closed: wecom.ReasonNotSubscribed}, nil, nil, false},
		{"callback backlog", leadResult{connected: true, held: stable, closed: wecom.ReasonBacklog}, nil, nil, false},
		{"closed by us", leadResult{connected: true, held: stable, closed: wecom.ReasonClosedByUs}, nil, nil, false},
		{"never connected", leadResult{reason: "dial failed"}, nil, nil, false},
		{"auth failed", leadResult{authFailed: true}, nil, nil, false},
	} {
		if got := keepTerm(c.res, c.termErr, c.stop, stable); got != c.want {
			t.Errorf("%s: keepTerm = %v, want %v", c.name, got, c.want)
		}
	}
}
