package serve

import (
	"testing"

	"github.com/rs/zerolog"
)

// The watchdog's liveness: true while the node's locks are free, false
// (no ping, so systemd restarts the node) while one is held past
// aliveWithin.
func TestAliveFollowsWedgedLocks(t *testing.T) {
	t.Parallel()
	n := &Node{log: zerolog.Nop(), leaders: newLeaders(20, 900)}
	o := &observer{n: n}
	if !o.alive() {
		t.Fatal("alive() = false with every lock free")
	}
	n.leaders.mu.Lock()
	wedged := o.alive()
	n.leaders.mu.Unlock()
	if wedged {
		t.Fatal("alive() = true while the node's lock was held")
	}
	if !o.alive() {
		t.Fatal("alive() = false after the lock was released")
	}
}
