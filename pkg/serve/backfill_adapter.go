package serve

import (
	"context"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/backfill"
)

// nodeBackfiller is the node's health.Backfiller: the gap backfill passes
// and the silence check, over the node's history source.
type nodeBackfiller struct{ n *Node }

// Pass runs the gap backfill of term's bot (Node.backfillPass).
func (b nodeBackfiller) Pass(ctx context.Context, term *election.Term) (backfill.Report, error) {
	return b.n.backfillPass(ctx, term)
}

// Missed counts bot's messages created in [since, until) that were never
// handled (Node.missed).
func (b nodeBackfiller) Missed(ctx context.Context, bot string, since, until time.Time) (int, error) {
	return b.n.missed(ctx, bot, since, until)
}
