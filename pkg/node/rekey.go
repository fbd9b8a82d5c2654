package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
)

// ErrNotHeld: the new secret was not proved, because the term that held
// the connection ended first (its next term connects with it).
var ErrNotHeld = errors.New("the bot's connection was not held here when the new secret came to be proved")

// kickedWithin bounds the wait for WeCom to kick the old connection once
// a new secret's subscribe was accepted; the old one is closed then.
const kickedWithin = 5 * time.Second

// proof is a secret to prove on the connection a term holds, and where
// its outcome goes (nil: accepted, in use; else WeCom's refusal, the
// connection held kept).
type proof struct {
	term   int64
	secret string
	result chan error
}

// Prove asks the term of this node that holds bot's connection to prove
// secret (a rotated one) by a subscribe, without a gap: the work on the
// connection finishes first (as at a graceful stop: streams open are
// closed with the handover note, the answers follow by push), then a
// second connection subscribes with secret. WeCom accepts it: it kicks
// the old connection, and the new one carries on the term. WeCom refuses
// it (its auth error, on the channel): a failed subscribe does not kick
// the holder, whose work starts again. ok is false when this node does
// not hold the bot's connection now.
func (n *Node) Prove(bot, secret string) (outcome <-chan error, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, st := n.loops[bot], n.status[bot]
	if l == nil || st.State != StateLeader {
		return nil, false
	}
	p := proof{term: st.TermRev, secret: secret, result: make(chan error, 1)}
	select {
	case l.prove <- p:
		return p.result, true
	default: // one is being proved
		return nil, false
	}
}

// proofs is where bot's loop receives the secrets to prove.
func (n *Node) proofs(bot string) chan proof {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l := n.loops[bot]; l != nil {
		return l.prove
	}
	return nil
}

// rekey proves p's secret while term holds conn (see Prove), the work on
// conn ended, and returns the connection that carries on.
func (n *Node) rekey(stop context.Context, term *election.Term, conn *wecom.Conn, p proof, log zerolog.Logger) *wecom.Conn {
	if p.term != term.Rev || term.Err() != nil || stop.Err() != nil || conn.Err() != nil {
		p.result <- ErrNotHeld
		return conn
	}
	log.Info().Msg("proving the bot's new secret: work on the connection finished; subscribing with it")
	wc := n.cfg.WeCom
	wc.BeforeSubscribe = term
	wc.BotID, wc.Secret, wc.Logger = term.Bot, p.secret, n.log.With().Int64("term", term.Rev).Logger()
	dctx, cancel := context.WithCancel(term.Context())
	defer cancel()
	defer context.AfterFunc(stop, cancel)()
	next, err := wecom.Dial(dctx, wc, termInbound{in: n.cfg.Inbound, term: term, log: n.log})
	if err != nil {
		log.Error().Err(err).Msg("the bot's new secret is refused: the connection held carries on with the old one")
		n.leaderEvent(term.Bot, "secret_refused", err.Error(), term.Rev)
		p.result <- fmt.Errorf("bot %s: the new secret's subscribe: %w", term.Bot, err)
		return conn
	}
	// WeCom kicks the old connection; what it delivered before is read.
	kctx, kcancel := context.WithTimeout(context.Background(), kickedWithin)
	select {
	case <-conn.Done():
	case <-kctx.Done():
		conn.Close()
		<-conn.Done()
	}
	kcancel()
	if h := n.cfg.Health; h != nil {
		h.Dialed(term, next, nil)
	}
	n.leaderEvent(term.Bot, "secret_rotated", "", term.Rev)
	log.Info().Msg("the bot's new secret is proved: the new connection carries on the term")
	p.result <- nil
	return next
}
