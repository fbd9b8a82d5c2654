package election_test

import (
	"context"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// connect stands in for dialing WeCom; it returns when the connection has
// ended (by its close event), which it must do soon after ctx is done.
func connect(ctx context.Context, bot string) error { <-ctx.Done(); return nil }

// The access-node loop for one bot: campaign, verify, hold the connection
// for exactly the term, close it, resign, campaign again.
func Example() {
	var cli *clientv3.Client // shared by every bot of the node
	var nodeCtx context.Context
	e, err := election.New(cli, election.Config{BotID: "bot1", NodeID: "n1", Logger: zerolog.Nop()})
	if err != nil {
		panic(err) // a config error names the field
	}
	for nodeCtx.Err() == nil {
		term, err := e.Campaign(nodeCtx)
		if err != nil {
			return // nodeCtx ended or the client was closed
		}
		// Right before connecting: a linearizable check that the key is
		// still ours (and that no old-layout node holds the bot), then the
		// free Check right before the subscribe frame. Any error: do not
		// connect.
		if err := term.Verify(term.Context()); err == nil && term.Check() == nil {
			_ = connect(term.Context(), term.Bot) // returns after close
		}
		// The connection is closed: release the bot at once.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = term.Resign(ctx)
		cancel()
	}
}

// A graceful stop: when stop ends (SIGTERM), the term keeps its lease
// renewed while the leader finishes, closes its connection and drains what
// it delivered; only then does Resign release the bot. Losing the lease
// meanwhile still cancels term.Context() at once.
func ExampleWithTermContext() {
	var e *election.Elector
	var stop context.Context // ends on SIGTERM
	term, err := e.Campaign(stop, election.WithTermContext(context.WithoutCancel(stop)))
	if err != nil {
		return // stop ended before this node won
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = term.Resign(ctx) // the term must be ended: it outlives stop
	}()
	if term.Verify(term.Context()) != nil {
		return
	}
	select {
	case <-term.Done():
		// Lost: close the connection at once.
	case <-stop.Done():
		// Graceful: finish in-flight work on the open connection, close
		// it, wait for its handlers; the lease is renewed throughout.
	}
}
