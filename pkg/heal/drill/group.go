package drill

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/heal/health"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/wecom"
)

type simStats struct {
	Connections int64            `json:"connections"`
	Frames      map[string]int64 `json:"frames"`
}

func (d *Drill) stats(ctx context.Context) (simStats, error) {
	var st simStats
	err := d.get(ctx, "/control/stats?bot_id="+url.QueryEscape(d.cfg.Bot), &st)
	return st, err
}

// warmGroup sends group messages, one per warmGroupEvery Intervals (a
// group's answers come one after another: a faster pace piles them up,
// and those still being sent at the fault are owed by push under the
// quota, which the round's T3 then waits for), until the group's own
// silence baseline (saved by the leader about once a minute) has an
// opinion that finds a silence within warmGroupThreshold: a group without
// one is never judged silent. Bounded by WarmUp.
func (d *Drill) warmGroup(ctx context.Context) error {
	route := wecom.RouteGroupPrefix + d.cfg.Group
	limits := health.BaselineLimits{MinWatched: d.cfg.MinWatched}
	deadline := time.Now().Add(d.cfg.WarmUp)
	d.logf("warming up: group messages in %s until its silence baseline has an opinion", d.cfg.Group)
	for k := 0; ; k++ {
		err := d.post(ctx, "/control/messages", map[string]string{"bot_id": d.cfg.Bot, "user_id": fmt.Sprintf("drill-warm-%d", k%20),
			"chat_type": wecom.ChatGroup, "chat_id": d.cfg.Group, "text": fmt.Sprintf("@bot warm-up %d", k)}, nil)
		if err != nil {
			return fmt.Errorf("warm-up message: %w", err)
		}
		if b, err := health.LoadBaseline(ctx, d.cfg.Health, d.cfg.Bot); err == nil && b.Routes[route] != nil {
			if thr, ok := b.Routes[route].Threshold(time.Now(), time.Local, limits); ok && thr <= warmGroupThreshold {
				d.logf("warm: a silence of %s over %s is suspicious now", route, thr.Round(time.Millisecond))
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the silence baseline of %s has no opinion after a warm-up of %s (health.silence_min_watched of the group's traffic is needed; give --warm-up longer or --min-watched as the nodes have it)", route, d.cfg.WarmUp)
		}
		if !clock.Sleep(ctx, d.cfg.Clock, warmGroupEvery*d.cfg.Interval) {
			return ctx.Err()
		}
	}
}

// warmGroupEvery: the warm-up's pace, in Intervals. At the default 1s,
// a message every 3 s: a threshold of about 21 s (Factor 7).
const warmGroupEvery = 3

// warmGroupThreshold: the group silence must be found well within T1's
// target of a minute.
const warmGroupThreshold = 30 * time.Second

// groupAnswers reads the drill's group transcript: its last seq, and the
// bot's answers (a finished stream or a pushed markdown) after seq.
func (d *Drill) groupAnswers(ctx context.Context, seq int64) (last, n int64, err error) {
	if d.cfg.Kind != KindGroupSilence {
		return 0, 0, nil
	}
	var tr struct {
		Entries []struct {
			transcriptEntry
			Seq int64 `json:"seq"`
		} `json:"messages"`
	}
	if err := d.get(ctx, "/control/transcript?bot_id="+url.QueryEscape(d.cfg.Bot)+"&chat="+url.QueryEscape(d.cfg.Group), &tr); err != nil {
		return 0, 0, err
	}
	for _, e := range tr.Entries {
		last = max(last, e.Seq)
		if e.Seq > seq && e.From == "bot" && (e.Finished || e.Kind == "markdown") {
			n++
		}
	}
	return last, n, nil
}

// waitGroupAnswers waits up to Settle for want answers in the group after
// seq, and returns how many came (at most want).
func (d *Drill) waitGroupAnswers(ctx context.Context, seq int64, want int) int {
	deadline := time.Now().Add(d.cfg.Settle)
	for {
		_, n, err := d.groupAnswers(ctx, seq)
		if err == nil && n >= int64(want) {
			return want
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return int(n)
		}
		pause.For(ctx, 2*time.Second)
	}
}
