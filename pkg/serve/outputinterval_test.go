package serve

import (
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pusher"
)

// The default output interval is the pusher's progress gap: no version is
// written that pacing would skip, none shown later than pacing allows.
func TestOutputIntervalFollowsThePushBudget(t *testing.T) {
	cfg := config.Defaults()
	if got, want := outputInterval(cfg), pusher.ProgressGap(cfg.Push.Budget); got != want || got < 3*time.Second {
		t.Fatalf("default output interval %s, want the progress gap %s (budget %d)", got, want, cfg.Push.Budget)
	}
	cfg.Push.Budget = 30
	if got := outputInterval(cfg); got != 2142857142*time.Nanosecond {
		t.Fatalf("budget 30: output interval %s, want 60s/28", got)
	}
	cfg.Worker.OutputInterval = 500 * time.Millisecond
	if got := outputInterval(cfg); got != 500*time.Millisecond {
		t.Fatalf("worker.output_interval 500ms: got %s", got)
	}
}
