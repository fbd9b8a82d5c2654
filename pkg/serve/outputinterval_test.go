package serve

import (
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pusher"
)

// The default output interval is half the pusher's progress gap: a
// frame held back by the budget still shows text at most half a gap old.
func TestOutputIntervalFollowsThePushBudget(t *testing.T) {
	cfg := config.Defaults()
	if got, want := outputInterval(cfg), pusher.ProgressGap(cfg.Push.Budget)/2; got != want || got < 1500*time.Millisecond {
		t.Fatalf("default output interval %s, want half the progress gap, %s (budget %d)", got, want, cfg.Push.Budget)
	}
	cfg.Push.Budget = 30
	if got := outputInterval(cfg); got != 2142857142*time.Nanosecond/2 {
		t.Fatalf("budget 30: output interval %s, want 60s/28/2", got)
	}
	cfg.Worker.OutputInterval = 500 * time.Millisecond
	if got := outputInterval(cfg); got != 500*time.Millisecond {
		t.Fatalf("worker.output_interval 500ms: got %s", got)
	}
}
