package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/schema"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// A conversation "may be incomplete" when a gap backfill could not answer
// every message it missed (no history source, or the budget ran out). The
// mark lives in the health bucket (key incomplete.<bot>.<chat>), is shown
// by `botctl incidents show` and `botctl status`, and is taken by the next
// message of that conversation: its answer tells the user.

// Mark is one conversation's "may be incomplete" mark.
type Mark struct {
	Bot  string    `json:"bot"`
	Chat string    `json:"chat"`
	Why  string    `json:"why"`
	At   time.Time `json:"at"`
}

const markPrefix = "incomplete."

func markKey(bot, chat string) string {
	return markPrefix + jetstream.EncodeToken(bot) + "." + jetstream.EncodeToken(chat)
}

// MarkIncomplete marks chats of bot as "may be incomplete".
func MarkIncomplete(ctx context.Context, kv natsjs.KeyValue, bot string, chats []string, why string, now time.Time) error {
	var errs []error
	for _, chat := range chats {
		raw, _ := schema.Marshal(Mark{Bot: bot, Chat: chat, Why: why, At: now.UTC()})
		if _, err := kv.Put(ctx, markKey(bot, chat), raw); err != nil {
			errs = append(errs, fmt.Errorf("mark conversation %s of bot %s incomplete: %w", chat, bot, err))
		}
	}
	return errors.Join(errs...)
}

// Marks lists the conversations marked "may be incomplete" ("" bot: all).
func Marks(ctx context.Context, kv natsjs.KeyValue, bot string) ([]Mark, error) {
	filter := markPrefix + ">"
	if bot != "" {
		filter = markPrefix + jetstream.EncodeToken(bot) + ".*"
	}
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list incomplete conversations: %w", err)
	}
	var out []Mark
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var m Mark
		if json.Unmarshal(e.Value(), &m) == nil {
			out = append(out, m)
		}
	}
	return out, nil
}

// watchMarks keeps h's in-memory set of marked conversations, so that the
// inbound path's check costs a map lookup, not a bucket read per message.
func (h *Health) watchMarks(ctx context.Context, kv natsjs.KeyValue) {
	for ctx.Err() == nil {
		w, err := kv.Watch(ctx, markPrefix+">")
		if err != nil {
			if !pause.For(ctx, 2*time.Second) {
				return
			}
			continue
		}
		for e := range w.Updates() {
			if e == nil {
				continue // initial values delivered
			}
			key := strings.TrimPrefix(e.Key(), markPrefix)
			h.mu.Lock()
			if e.Operation() == natsjs.KeyValuePut {
				h.marks[key] = true
			} else {
				delete(h.marks, key)
			}
			h.mu.Unlock()
		}
		w.Stop()
	}
}

// Marked reports, from memory, whether bot's conversation chat may carry
// a "may be incomplete" mark: TakeIncomplete reads JetStream only then.
func (h *Health) Marked(bot, chat string) bool {
	key := strings.TrimPrefix(markKey(bot, chat), markPrefix)
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.marks[key] && h.bound != nil
}

// TakeIncomplete reports whether bot's conversation chat is marked "may be
// incomplete", and removes the mark: the caller tells the user now.
func (h *Health) TakeIncomplete(ctx context.Context, bot, chat string) (string, bool) {
	key := markKey(bot, chat)
	h.mu.Lock()
	marked := h.marks[strings.TrimPrefix(key, markPrefix)]
	bd := h.bound
	h.mu.Unlock()
	if !marked || bd == nil {
		return "", false
	}
	e, err := bd.kv.Get(ctx, key)
	if err != nil {
		return "", false
	}
	// Only the one who deletes this revision tells the user.
	if err := bd.kv.Delete(ctx, key, natsjs.LastRevision(e.Revision())); err != nil {
		return "", false
	}
	var m Mark
	json.Unmarshal(e.Value(), &m)
	return m.Why, true
}
