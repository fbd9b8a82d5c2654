package serve

import (
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/pusher"
)

// The default output interval is the pusher's progress gap and a tenth:
// about one write per frame the pusher may send (a frame held back by
// the budget asks the worker for its text: pkg/pusher's flush.go).
func TestOutputIntervalFollowsThePushBudget(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	if got, want := outputInterval(cfg), pusher.ProgressGap(cfg.Push.Budget)*11/10; got != want || got < 3600*time.Millisecond || got > 3700*time.Millisecond {
		t.Fatalf("default output interval %s, want the progress gap and a tenth, %s (budget %d)", got, want, cfg.Push.Budget)
	}
	cfg.Push.Budget = 30
	if got := outputInterval(cfg); got != 2142857142*time.Nanosecond*11/10 {
		t.Fatalf("budget 30: output interval %s, want 60s/28 and a tenth", got)
	}
	cfg.Worker.OutputInterval = 500 * time.Millisecond
	if got := outputInterval(cfg); got != 500*time.Millisecond {
		t.Fatalf("worker.output_interval 500ms: got %s", got)
	}
}
