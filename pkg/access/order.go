package access

import (
	"sync"
	"time"
)

// A conversation's messages are dispatched in the order the connection
// read them, across a message's download: a message with files is
// dispatched only once its files are stored, and a later message of the
// same conversation (a text, or more files) is not dispatched before it.
// Each message with files is a gate in its conversation from the moment
// it is read (HandleMessage, in the connection's callback order) until
// its dispatch returns or its handling ends without one; a later
// message of the conversation waits, before its own dispatch, for every
// gate that was open when it was read. It waits without its handling
// slot (as the download does), and at most until the media message's
// own deadline (its arrival plus media.message_timeout) and one handling
// Timeout for that message's dispatch after: past it, it goes on. So the
// files are never answered "busy" because a later text of theirs was
// dispatched first, and the conversation's task runs in order. Other
// conversations, and messages answered without a task (commands,
// refusals), wait for nothing.

// gate is one message with files, read and not yet dispatched.
type gate struct {
	done     chan struct{}
	once     sync.Once
	deadline time.Time // past it, later messages go on without it
}

// gates are the open gates of each conversation (bot and chat), oldest
// first.
type gates struct {
	mu sync.Mutex
	by map[string][]*gate
}

// enter is called for each message read, in the connection's order: it
// returns the gates open in conversation key (those the message waits
// for) and, when the message has files, opens its own gate, open until
// leave. own is nil for a message without files.
func (g *gates) enter(key string, files bool, deadline time.Time) (ahead []*gate, own *gate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ahead = append([]*gate(nil), g.by[key]...)
	if files {
		own = &gate{done: make(chan struct{}), deadline: deadline}
		if g.by == nil {
			g.by = map[string][]*gate{}
		}
		g.by[key] = append(g.by[key], own)
	}
	return ahead, own
}

// leave closes own (nil: nothing); called again, it does nothing.
func (g *gates) leave(key string, own *gate) {
	if own == nil {
		return
	}
	own.once.Do(func() {
		close(own.done)
		g.mu.Lock()
		defer g.mu.Unlock()
		list := g.by[key]
		for i, x := range list {
			if x == own {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(g.by, key)
		} else {
			g.by[key] = list
		}
	})
}

// open reports whether any gate of ahead is still open.
func open(ahead []*gate) bool {
	for _, x := range ahead {
		select {
		case <-x.done:
		default:
			return true
		}
	}
	return false
}

// inOrder waits, before h's dispatch, for the messages with files read
// before it in its conversation (see above). It gives back h's handling
// slot when it has to wait, and renews the handling's time after.
func (h *handling) inOrder() {
	if !open(h.in.ahead) {
		return
	}
	h.slot.free()
	t0 := time.Now()
	for _, x := range h.in.ahead {
		wait := x.deadline.Sub(h.a.cfg.Now())
		if wait <= 0 {
			continue
		}
		t := h.a.cfg.Clock.NewTimer(wait)
		select {
		case <-x.done:
		case <-t.C():
			h.log.Warn().Msg("a message with files before this one in its conversation is still not dispatched at its deadline: this one goes on")
		}
		t.Stop()
	}
	h.stage("in_order", time.Since(t0))
	h.renew()
}
