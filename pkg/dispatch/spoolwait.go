package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
)

// What becomes of a task that waited long in the spool (the forwarder
// decides how long: spool.late_after, spool.expiry): forwarded late, its
// answer says so; past the expiry, not run at all, and its user told.

// markLate marks the spooled task e late, in its record and in the
// payload to be queued, so that its answer starts with the late note. An
// error (JetStream away again) keeps the entry for a later try.
func (s *SpoolOut) markLate(ctx context.Context, e *jetstream.SpoolEntry) error {
	var m task.Message
	if json.Unmarshal(e.Payload, &m) != nil || m.TaskID == "" {
		return nil // forwarded as is; the worker terminates it
	}
	m.Late = true
	raw, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	if _, err := s.lc.Open(ctx, task.RecordOf(m)); err != nil {
		return fmt.Errorf("mark spooled task %s late: %w", m.TaskID, err)
	}
	e.Payload = raw
	s.log.Info().Str("bot", e.Bot).Str("task", m.TaskID).Dur("waited", e.Waited(time.Now())).Msg("spooled task forwarded late; its answer says so")
	return nil
}

// Expired is the forwarder's Expired of tasks that waited in the spool
// longer than expiry (spool.expiry): see spoolExpired.
func (s *SpoolOut) Expired(expiry time.Duration) jetstream.Publisher {
	return spoolExpired{s, expiry}
}

// spoolExpired is the forwarder's Expired: a task that waited in the
// spool longer than spool.expiry is not run. It is recorded failed, its
// conversation marked "may be incomplete" for this answer, so that the
// pusher tells its user, who was told "received", that the message was
// not answered and to send it again. One a fallback tier ran, or runs,
// meanwhile goes the way of any spooled task.
type spoolExpired struct {
	out    *SpoolOut
	expiry time.Duration
}

// Publish has the forwarder's Publisher contract: an error keeps the
// entry for a later try.
func (x spoolExpired) Publish(ctx context.Context, e jetstream.SpoolEntry) error {
	s := x.out
	switch state, err := s.offQueue(ctx, e); {
	case err != nil:
		return err // JetStream still away: keep the entry
	case state != notRun:
		return s.Publish(ctx, e)
	}
	var m task.Message
	if err := json.Unmarshal(e.Payload, &m); err != nil || m.TaskID == "" {
		s.log.Error().Err(err).Str("bot", e.Bot).Str("msgid", e.MsgID).Msg("expired spooled entry unreadable; dropped")
		return nil
	}
	waited := e.Waited(time.Now()).Round(time.Second)
	m.Incomplete = fmt.Sprintf("a message waited %s in a node's spool while JetStream was unreachable, past spool.expiry (%s), and was not answered", waited, x.expiry)
	reason := fmt.Sprintf("not answered: waited %s in the local spool while JetStream was unreachable, longer than spool.expiry (%s); the user is told to send it again", waited, x.expiry)
	if _, err := s.lc.Refused(ctx, m, reason, false); err != nil {
		return fmt.Errorf("record expired spooled task %s: %w", m.TaskID, err)
	}
	s.log.Warn().Str("bot", e.Bot).Str("task", m.TaskID).Dur("waited", waited).Dur("expiry", x.expiry).Msg("spooled task expired: not run, its user told")
	if s.leaders != nil {
		s.leaders.Forwarded(e.Bot, m.TaskID)
	}
	return nil
}
