package access

import (
	"context"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/retry"
)

// marks keeps the seen marks JetStream refused (a message answered
// without a task while its data plane failed: a busy reply, a refusal)
// and writes them again, oldest first, until each is written or
// markPatience has passed since it was made. A mark written late still
// keeps the next leader's gap backfill from answering its message again;
// one given up on is logged at warn with its msgid, and its message may
// be answered twice (late, with the late note). One writer runs while any
// mark waits; Access.Wait tries each once more and stops it.
type marks struct {
	mu      sync.Mutex
	waiting []pendingMark
	running bool
	stop    chan struct{} // closed by Access.Wait
	stopped bool
}

type pendingMark struct {
	js      *bound
	bot     string
	msgid   string
	created time.Time // the message's, for the watermark once written (zero: a history id's mark, the watermark not moved)
	at      time.Time // when it was first refused
}

// markPatience is how long a refused mark is tried again: past the
// minute a node's connection takes to leave a NATS server cut off from
// its cluster (nats.jetstream_failover 30 s, then another server).
const markPatience = 3 * time.Minute

// maxWaitingMarks bounds the marks kept: past it the oldest is dropped
// (logged), so a data plane down for long cannot grow the node's memory.
const maxWaitingMarks = 10000

// keepMark keeps a mark JetStream refused, for the writer.
func (a *Access) keepMark(js *bound, bot, msgid string, created time.Time) {
	m := &a.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		a.log.Warn().Str("bot", bot).Str("msgid", msgid).Msg("message not marked seen (JetStream refused it while the node stops); the next leader's gap backfill may answer it again")
		return
	}
	if len(m.waiting) >= maxWaitingMarks {
		old := m.waiting[0]
		m.waiting = m.waiting[1:]
		a.log.Warn().Str("bot", old.bot).Str("msgid", old.msgid).Int("waiting", maxWaitingMarks).Msg("seen mark dropped (too many waiting for JetStream); the gap backfill may answer its message again")
	}
	m.waiting = append(m.waiting, pendingMark{js: js, bot: bot, msgid: msgid, created: created, at: a.cfg.Clock.Now()})
	if !m.running {
		m.running = true
		if m.stop == nil {
			m.stop = make(chan struct{})
		}
		a.wg.Go(a.writeMarks)
	}
}

// writeMarks writes the waiting marks until none waits, backing off
// while JetStream refuses them. Once Access.Wait stopped it, it tries the
// waiting marks once more, giving up on them all at the first refusal.
func (a *Access) writeMarks() {
	m := &a.marks
	backoff := retry.New(250*time.Millisecond, 5*time.Second)
	for {
		m.mu.Lock()
		batch, stopping, stop := m.waiting, m.stopped, m.stop
		m.waiting = nil
		m.mu.Unlock()
		var left []pendingMark
		for i, p := range batch {
			ctx, cancel := context.WithTimeout(context.Background(), a.cfg.Timeout)
			err := p.js.store.MarkSeen(ctx, p.bot, p.msgid)
			cancel()
			if err == nil {
				if !p.created.IsZero() {
					a.handled(p.bot, p.created)
				}
				continue
			}
			if a.cfg.Clock.Since(p.at) > markPatience {
				a.log.Warn().Err(err).Str("bot", p.bot).Str("msgid", p.msgid).Msg("message not marked seen; the gap backfill may answer it again")
				continue
			}
			if stopping {
				a.log.Warn().Err(err).Int("marks", len(batch)-i).Msg("messages not marked seen as the node stops; the next leader's gap backfill may answer them again")
				break
			}
			left = batch[i:] // JetStream refuses: the rest waits too
			break
		}
		m.mu.Lock()
		m.waiting = append(left, m.waiting...)
		if len(m.waiting) == 0 || stopping {
			m.waiting, m.running = nil, false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		if len(left) == 0 {
			backoff.Reset()
			continue
		}
		select {
		case <-stop:
		case <-a.cfg.Clock.After(backoff.Next()):
		}
	}
}

// stopMarks makes the writer try each waiting mark once more and end.
func (a *Access) stopMarks() {
	m := &a.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.stopped {
		m.stopped = true
		if m.stop != nil {
			close(m.stop)
		}
	}
}
