package backfill

import (
	"context"
	"errors"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/retry"
	"github.com/rs/zerolog"
)

// ErrNoHistory says no history source is configured: messages missed
// while no node held the connection cannot be recovered.
var ErrNoHistory = errors.New("no history source (backfill.history_url): messages missed while the bot was away cannot be recovered")

// Options configure a node's Backfiller. Zero values take the defaults of
// Config (Overlap, MaxMessages, Rate); AuditEvery has none: 0 runs no
// audit.
type Options struct {
	// Source is the bots' message history; nil: no backfill (every
	// method answers ErrNoHistory, Audit returns at once).
	Source      HistorySource
	Overlap     time.Duration
	MaxMessages int
	Rate        float64
	// AuditEvery is the period of a term's history audit (Audit).
	AuditEvery time.Duration
	Logger     zerolog.Logger
}

// SourceFor is a node's history source: the WeCom simulator's history API
// at historyURL (backfill.history_url), or, without one, WeCom's own
// message history over each bot's connection (WeComHistory).
func SourceFor(historyURL string) HistorySource {
	if historyURL != "" {
		return &SimHistory{Base: historyURL}
	}
	return &WeComHistory{}
}

// Connected tells the history source which connection this node holds
// for bot (WeComHistory asks its server over it); the returned func
// forgets it again.
func (b *Backfiller) Connected(bot string, c Conn) (gone func()) {
	w, ok := b.opts.Source.(*WeComHistory)
	if !ok {
		return func() {}
	}
	w.Connected(bot, c)
	return func() { w.Disconnected(bot, c) }
}

// Backfiller is a node's gap backfill over every bot it leads: the
// passes at a term's start and after an incident (Pass), the history
// audit while a term lasts (Audit), and the health monitor's count of
// missed messages (Missed). It does nothing until Bind gives it the
// store and the inbound path; until then each call waits for that.
type Backfiller struct {
	opts  Options
	bound chan struct{} // closed by Bind
	store WatermarkBucket
	in    Inbound
	wm    *Tracker // nil: the watermark is not held during a pass
}

// New returns a Backfiller that waits for Bind.
func New(opts Options) *Backfiller {
	return &Backfiller{opts: opts, bound: make(chan struct{})}
}

// Bind supplies JetStream's store, the inbound path and the node's
// watermark tracker (held by each pass), once JetStream answers. Call it
// once.
func (b *Backfiller) Bind(store WatermarkBucket, in Inbound, wm *Tracker) {
	b.store, b.in, b.wm = store, in, wm
	close(b.bound)
}

// isBound reports whether Bind has run.
func (b *Backfiller) isBound() bool {
	select {
	case <-b.bound:
		return true
	default:
		return false
	}
}

// wait waits for Bind, false if ctx ends first.
func (b *Backfiller) wait(ctx context.Context) bool {
	select {
	case <-b.bound:
		return true
	case <-ctx.Done():
		return false
	}
}

func (b *Backfiller) config(log zerolog.Logger) Config {
	return Config{Store: b.store, Source: b.opts.Source, Overlap: b.opts.Overlap, MaxMessages: b.opts.MaxMessages,
		Rate: b.opts.Rate, Inbound: b.in, Logger: log}
}

// PassDelay lets the callbacks a new connection received at once be
// handled (and recorded) before a pass looks for what is missing.
const PassDelay = 3 * time.Second

// passRetries and passRetry bound the passes that wait for busy
// conversations: about ten minutes, longer than most answers.
const (
	passRetries = 40
	passRetry   = 15 * time.Second
)

// Pass runs the gap backfill of term's bot once (the health monitor
// calls it at the start of every term, and when a silent connection
// delivers again): messages sent while no node held the connection, read
// by a leader that died before recording them, or held only in a lost
// node's spool. Messages deferred because their conversation is busy are
// handed over by later passes over the same range (up to passRetries,
// passRetry apart). It returns what the last pass did, with the messages
// filled by every pass.
func (b *Backfiller) Pass(ctx context.Context, term *election.Term) (Report, error) {
	log := b.opts.Logger.With().Str("bot", term.Bot).Int64("term", term.Rev).Logger()
	if b.opts.Source == nil {
		log.Info().Msg("gap backfill off (no backfill.history_url): messages missed while no node held the connection are not recovered")
		return Report{}, ErrNoHistory
	}
	if !b.wait(ctx) {
		return Report{}, ctx.Err()
	}
	cfg := b.config(log)
	// The watermark stays where this pass starts until it ends: the
	// messages it finds missed may wait for their conversation for
	// minutes, and should this term end first, the next term's pass must
	// start before them too (Tracker.Hold).
	finished := false
	if b.wm != nil {
		release := b.wm.Hold(term.Bot)
		defer func() { release(finished) }()
	}
	// Where the gap starts is read now, before this connection's own
	// traffic moves the watermark: read after the delay, a gap longer than
	// the overlap would lose its older part.
	since, err := Since(ctx, cfg, term.Bot, time.Now())
	if err != nil {
		since = time.Time{} // read again in the loop
	}
	if !pause.For(ctx, PassDelay) {
		return Report{}, ctx.Err()
	}
	// Up to now: what this term's connection received meanwhile is
	// recorded by now, and is skipped as known.
	until := time.Now()
	filled := 0
	backoff := retry.New(time.Second, 30*time.Second)
	for passes := 0; ; {
		var wait time.Duration
		var rep Report
		var err error
		if since.IsZero() {
			since, err = Since(ctx, cfg, term.Bot, until)
		}
		if err == nil {
			rep, err = Run(ctx, cfg, term.Bot, since, until)
			filled += rep.Filled
		}
		switch {
		case err == nil && rep.Deferred > 0 && passes < passRetries:
			// Missed messages of conversations busy with another task: a
			// later pass answers them once they are free.
			passes++
			log.Info().Interface("backfill", rep).Msg("gap backfill: some missed messages wait for their conversation")
			// Handed over again every few seconds meanwhile; the next read
			// of the history follows at once and counts what is left.
			filled += retryDeferred(ctx, cfg, term.Bot, rep, passRetry)
		case err == nil:
			if rep.Filled > 0 || rep.NotFilled > 0 || rep.Deferred > 0 {
				log.Warn().Interface("backfill", rep).Msg("gap backfill found missed messages")
			} else {
				log.Info().Interface("backfill", rep).Msg("gap backfill: nothing missed")
			}
			// Still deferred after the last pass: not filled.
			finished = true
			rep.NotFilled += rep.Deferred
			rep.Filled = filled
			return rep, nil
		case ctx.Err() != nil:
			return rep, ctx.Err()
		case errors.Is(err, ErrNoHistory):
			// The source cannot give this gap (not authorized, not
			// covered): asking again would not change that, nor would
			// the next term's pass. The gap is the caller's to mark, and
			// the watermark moves on, as without a source.
			log.Warn().Err(err).Msg("gap backfill: the history cannot give the gap's messages")
			finished = true
			return rep, err
		default:
			wait = backoff.Next()
			log.Warn().Err(err).Dur("retry_in", wait).Msg("gap backfill failed; retrying")
		}
		if !pause.For(ctx, wait) {
			return rep, ctx.Err()
		}
	}
}

// auditLag keeps the history audit off the newest messages, which may
// still be on their way through the connection; auditMaxWindow is how far
// back a window with messages deferred is read again.
const (
	auditLag       = 10 * time.Second
	auditMaxWindow = 10 * time.Minute
)

// Audit reads term's bot's history every Options.AuditEvery until ctx
// (the term) ends, from where its last read ended (less the overlap) to
// auditLag before now, and answers what no connection got, late (what
// was handled is known and skipped). The passes at a term's start and
// after an incident cover outages; the audit covers a connection deaf for
// less time than the silence alarm takes, which opens no incident. A
// window with messages deferred (their conversation busy) or beyond the
// budget is read again next time, up to auditMaxWindow back.
func (b *Backfiller) Audit(ctx context.Context, term *election.Term) {
	if b.opts.Source == nil || b.opts.AuditEvery <= 0 || !b.wait(ctx) {
		return
	}
	log := b.opts.Logger.With().Str("bot", term.Bot).Int64("term", term.Rev).Logger()
	cfg := b.config(log)
	from := time.Now() // the term's first pass reads what came before
	// While messages the audit found wait for their conversation, the
	// watermark is held, and lowered to the oldest of them: should the
	// term end first, the next term's pass reads them again (as a pass's
	// own deferred messages, Pass).
	var release func(finished bool)
	defer func() {
		if release != nil {
			release(false)
		}
	}()
	for wait := b.opts.AuditEvery; pause.For(ctx, wait); {
		wait = b.opts.AuditEvery
		until := time.Now().Add(-auditLag)
		rep, err := Run(ctx, cfg, term.Bot, from.Add(-cfg.Overlap), until)
		switch {
		case err != nil && errors.Is(err, ErrNoHistory):
			log.Debug().Err(err).Msg("history audit: the history cannot give this window")
			continue
		case err != nil:
			if ctx.Err() == nil {
				log.Warn().Err(err).Msg("history audit failed; the next one reads this window again")
			}
			continue
		case rep.Filled > 0 || rep.Deferred > 0 || rep.NotFilled > 0:
			log.Warn().Interface("backfill", rep).Msg("history audit: messages no connection got (answered late)")
		}
		if rep.Deferred > 0 {
			// Missed messages wait for their conversation, busy with
			// another task: handed over again every few seconds for as
			// long as a pass waits (passRetry), then read again at once,
			// not a whole period later.
			wait = 0
			if b.wm != nil {
				if release == nil {
					release = b.wm.Hold(term.Bot)
				}
				if err := b.wm.Lower(ctx, term.Bot, rep.FirstDeferred.Add(-time.Second)); err != nil && ctx.Err() == nil {
					log.Warn().Err(err).Msg("history audit: watermark not lowered to its deferred messages; the next term may not read them again")
				}
			}
		} else if release != nil {
			release(true)
			release = nil
		}
		if (rep.Deferred == 0 && rep.NotFilled == 0) || until.Sub(from) > auditMaxWindow {
			from = until
		}
		if rep.Deferred > 0 {
			retryDeferred(ctx, cfg, term.Bot, rep, passRetry)
		}
	}
}

// Missed counts bot's messages in the history created in [since, until)
// that were never handled (the health monitor's check of a silence).
func (b *Backfiller) Missed(ctx context.Context, bot string, since, until time.Time) (int, error) {
	if b.opts.Source == nil {
		return 0, ErrNoHistory
	}
	if !b.isBound() {
		return 0, errors.New("JetStream not bound yet")
	}
	msgs, err := b.opts.Source.History(ctx, bot, since, until)
	if err != nil {
		return 0, err
	}
	missed := 0
	for _, m := range msgs {
		known, err := knownAs(ctx, b.in, bot, m)
		if err != nil {
			return 0, err
		}
		if !known {
			missed++
		}
	}
	return missed, nil
}
