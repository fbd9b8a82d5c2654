package backfill

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/botctl/botctl/pkg/pause"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"
)

// Config shapes a pass.
type Config struct {
	Store   WatermarkBucket
	Source  HistorySource
	Overlap time.Duration // read this much before the watermark (and for the first pass ever, before the term). Default 60s.
	// MaxMessages bounds the messages a pass hands over. Default 500.
	MaxMessages int
	// Rate bounds how fast a pass hands messages over (per second).
	// Default 20.
	Rate float64
	// Inbound is the inbound path: it knows what was handled and
	// answers what was not.
	Inbound Inbound
	Logger  zerolog.Logger
}

// Inbound is the leader's inbound path as a pass uses it
// (*access.Access).
type Inbound interface {
	// Known reports whether a message was handled already (its task
	// record exists, or it is marked seen).
	Known(ctx context.Context, bot, msgid string) (bool, error)
	// Late hands a missed message over, to be answered by push with a
	// note that it is late; ErrBusy defers it. A message taken (or
	// skipped) is known from then on under its msgid and its
	// Message.HistoryID.
	Late(ctx context.Context, bot string, m Message) error
}

// ErrBusy, returned by Inbound.Late, says the missed message's conversation has a
// task now: the message is deferred, and a later pass over the same range
// hands it over once the conversation is free (as if the user had asked
// again), instead of refusing it as busy long after the fact.
var ErrBusy = errors.New("backfill: conversation busy")

// Report is what one pass did.
type Report struct {
	Bot       string    `json:"bot"`
	Since     time.Time `json:"since"`
	Until     time.Time `json:"until"`
	Read      int       `json:"read"`       // messages in the range
	Known     int       `json:"known"`      // already handled
	Filled    int       `json:"filled"`     // missed, handed over now
	Deferred  int       `json:"deferred"`   // missed, conversation busy: for a later pass
	NotFilled int       `json:"not_filled"` // missed, beyond MaxMessages or refused
	// FirstDeferred is when the oldest deferred message was sent.
	FirstDeferred time.Time `json:"first_deferred,omitzero"`
	// Unfilled are the conversations of the messages not filled: they
	// may be incomplete.
	Unfilled []string      `json:"unfilled,omitempty"`
	Took     time.Duration `json:"took"`
	// later are the deferred messages, in the order read, for
	// retryDeferred.
	later []Message
}

func (r *Report) unfilled(chat string) {
	r.NotFilled++
	for _, c := range r.Unfilled {
		if c == chat {
			return
		}
	}
	r.Unfilled = append(r.Unfilled, chat)
}

// Since is where a pass for bot up to until starts: its watermark less
// the overlap (until less the overlap when it has none yet). Later passes
// over the same gap keep it, although the watermark moves on.
func Since(ctx context.Context, cfg Config, bot string, until time.Time) (time.Time, error) {
	if cfg.Overlap <= 0 {
		cfg.Overlap = time.Minute
	}
	wm, err := LoadWatermark(ctx, cfg.Store, bot)
	if err != nil {
		return time.Time{}, err
	}
	if wm.Created.IsZero() {
		return until.Add(-cfg.Overlap), nil
	}
	return wm.Created.Add(-cfg.Overlap), nil
}

// knownAs reports whether m was handled under its own id or under the
// id WeCom's history gives it (Message.HistoryID): a message answered
// live, or from another history source, is known to every source.
func knownAs(ctx context.Context, in Inbound, bot string, m Message) (bool, error) {
	known, err := in.Known(ctx, bot, m.MsgID)
	if err != nil || known {
		return known, err
	}
	if id := m.HistoryID(bot); id != "" && id != m.MsgID {
		return in.Known(ctx, bot, id)
	}
	return false, nil
}

// Run reads bot's history in [since, until) and hands every message not
// handled yet to cfg.Inbound.Late.
func Run(ctx context.Context, cfg Config, bot string, since, until time.Time) (Report, error) {
	if cfg.MaxMessages <= 0 {
		cfg.MaxMessages = 500
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 20
	}
	limit := rate.NewLimiter(rate.Limit(cfg.Rate), 1)
	start := time.Now()
	rep := Report{Bot: bot, Since: since, Until: until}
	msgs, err := cfg.Source.History(ctx, bot, rep.Since, until)
	if err != nil {
		return rep, err
	}
	rep.Read = len(msgs)
	for _, m := range msgs {
		known, err := knownAs(ctx, cfg.Inbound, bot, m)
		if err != nil {
			return rep, err
		}
		if known {
			rep.Known++
			continue
		}
		if rep.Filled >= cfg.MaxMessages {
			rep.unfilled(m.Chat)
			continue
		}
		if err := limit.Wait(ctx); err != nil {
			return rep, err
		}
		if err := cfg.Inbound.Late(ctx, bot, m); errors.Is(err, ErrBusy) {
			rep.Deferred++
			rep.later = append(rep.later, m)
			if rep.FirstDeferred.IsZero() || m.Created.Before(rep.FirstDeferred) {
				rep.FirstDeferred = m.Created
			}
			continue
		} else if err != nil {
			rep.unfilled(m.Chat)
			cfg.Logger.Warn().Err(err).Str("bot", bot).Str("msgid", m.MsgID).Msg("missed message not filled")
			continue
		}
		rep.Filled++
	}
	rep.Took = time.Since(start)
	if rep.NotFilled > 0 {
		cfg.Logger.Error().Str("bot", bot).Int("not_filled", rep.NotFilled).Msg("backfill incomplete: some missed messages were not answered")
	}
	return rep, nil
}

// deferredRetry is how often a pass's deferred messages are handed over
// again between two reads of the history: a conversation whose user goes
// on asking is free only for the few seconds between an answer and the
// next question, which a read every passRetry would seldom hit.
const deferredRetry = 2 * time.Second

// retryDeferred hands rep's deferred messages over again every
// deferredRetry, at most cfg.Rate a second as a pass does, for up to
// within or until none waits, and returns how many it filled. A message
// found known meanwhile (answered live, or by another pass) is dropped;
// one still busy, or refused for another reason, waits for the next read
// of the history, which counts it.
func retryDeferred(ctx context.Context, cfg Config, bot string, rep Report, within time.Duration) (filled int) {
	if cfg.Rate <= 0 {
		cfg.Rate = 20
	}
	limit := rate.NewLimiter(rate.Limit(cfg.Rate), 1)
	msgs := slices.Clone(rep.later)
	for end := time.Now().Add(within); len(msgs) > 0; {
		left := time.Until(end)
		if left <= 0 || !pause.For(ctx, min(deferredRetry, left)) {
			return filled
		}
		still := msgs[:0]
		for _, m := range msgs {
			known, err := knownAs(ctx, cfg.Inbound, bot, m)
			if err == nil && !known {
				if err = limit.Wait(ctx); err != nil {
					return filled
				}
				err = cfg.Inbound.Late(ctx, bot, m)
				if err == nil {
					filled++
					continue
				}
			}
			if err != nil {
				still = append(still, m)
			}
		}
		msgs = still
	}
	return filled
}
