package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/dispatch"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
)

// handOff is the inbound path's Dispatcher: the dispatcher once
// JetStream is bound; before that, the spool (busy if the conversation
// already has a spooled task, as the dispatcher itself would answer).
type handOff struct{ n *Node }

func (h handOff) DispatchUnless(ctx context.Context, m task.Message, dup func() bool) (dispatch.Outcome, error) {
	n := h.n
	if n.started() {
		return n.Dispatch.DispatchUnless(ctx, m, dup)
	}
	if n.Spool.Holds(m.Bot, m.Chat) {
		return dispatch.Outcome{Busy: true}, nil
	}
	payload, err := json.Marshal(m)
	if err != nil {
		return dispatch.Outcome{}, err
	}
	if err := n.spoolTask(m, payload); err != nil {
		return dispatch.Outcome{}, fmt.Errorf("JetStream not reachable and the spool refused the task: %w", err)
	}
	n.log.Info().Str("bot", m.Bot).Str("task", m.TaskID).Msg("JetStream not reachable yet: task spooled")
	return dispatch.Outcome{Spooled: true}, nil
}

// taskSpool is the dispatcher's Spool: the node's spool, whose forwarder
// is woken for every task kept.
type taskSpool struct {
	n   *Node
	fwd *jetstream.Forwarder
}

func (s taskSpool) Keep(m task.Message, payload []byte) error {
	err := s.n.spoolTask(m, payload)
	s.fwd.Kick()
	return err
}

func (s taskSpool) Holds(bot, conversation string) bool { return s.n.Spool.Holds(bot, conversation) }

func (n *Node) spoolTask(m task.Message, payload []byte) error {
	return n.Spool.Append(jetstream.SpoolEntry{Bot: m.Bot, Conversation: m.Chat, MsgID: m.MsgID, Payload: payload, Received: m.Received})
}

// localTier is the dispatcher's tier 3: this node's worker, bounded by
// its slots (a full node refuses, and the dispatcher keeps the task in
// the spool for the queue). The task runs under ctx (the node's work)
// and wg tracks it.
type localTier struct {
	ctx context.Context
	w   *worker.Worker
	wg  *sync.WaitGroup
}

func (l localTier) Start(m task.Message) error {
	return l.w.Go(l.ctx, m, string(dispatch.TierLocal), l.wg)
}
