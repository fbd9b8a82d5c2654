package serve

import (
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pusher"
)

// The default output interval is a little over the pusher's progress
// gap: every version written can be shown, and arrives when its frame
// may go.
func TestOutputIntervalFollowsThePushBudget(t *testing.T) {
	cfg := config.Defaults()
	gap := pusher.ProgressGap(cfg.Push.Budget)
	if got := outputInterval(cfg); got <= gap || got > gap+gap/5 {
		t.Fatalf("default output interval %s, want just over the progress gap, %s (budget %d)", got, gap, cfg.Push.Budget)
	}
	cfg.Push.Budget = 30
	if got, want := outputInterval(cfg), 2142857142*time.Nanosecond*11/10; got != want {
		t.Fatalf("budget 30: output interval %s, want 60s/28 × 1.1 (%s)", got, want)
	}
	cfg.Worker.OutputInterval = 500 * time.Millisecond
	if got := outputInterval(cfg); got != 500*time.Millisecond {
		t.Fatalf("worker.output_interval 500ms: got %s", got)
	}
}
