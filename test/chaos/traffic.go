package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/test/e2e/cluster"
)

// Msg is one user message posted through the simulator's control API.
type Msg struct {
	Round     string // scenario/round label
	User      string // who asked (single chat: the conversation too)
	Chat      string // the group chat it was asked in; "": a single chat
	Question  string // unique per message, so its answer can be found by content
	MsgID     string
	Delivered bool // WeCom accepted it and wrote the callback to a connection
	Probe     bool // posted after the round to check the conversation is not locked
	// Media: the message carries a file (PostMedia); the storage-full
	// reply answers it.
	Media bool
	// Reprobed: this probe was refused as busy while the conversation
	// still owed an answer to an earlier message, and a second probe
	// asked again once that was in: the second one is judged.
	Reprobed bool
	PostedAt time.Time
	PostErr  string
}

// Traffic is a set of closed-loop users: each posts a message, waits for
// its complete answer (or a timeout), thinks, and posts the next. Real
// users do not pile a second question on a running one; a user who gives
// up waiting asks again anyway, which is what shows a locked conversation.
type Traffic struct {
	c       *cluster.Cluster
	bot     string
	users   []string // closed-loop users
	burst   []string // one message each at the moment of a fault
	extra   []string // conversations a scenario's own messages started (PostMedia)
	think   time.Duration
	wait    time.Duration // a user gives up waiting for an answer after this and asks again
	nonce   string
	counter map[string]int
	// demo is the nodes' demo backend: it says how long an answer takes.
	demo ai.DemoConfig
	// mediaEvery: a closed-loop user's every mediaEvery-th message
	// carries a small file (PostMedia); 0 or less: none.
	mediaEvery int
	// poll: how often a waiting user reads its transcript (0: every
	// 500 ms); many bots' users poll less often, so the simulator is not
	// their load.
	poll time.Duration

	mu   sync.Mutex
	msgs []*Msg
}

func NewTraffic(c *cluster.Cluster, bot string, users, burst int, think, wait time.Duration, nonce string) *Traffic {
	t := &Traffic{c: c, bot: bot, think: think, wait: wait, nonce: nonce, counter: map[string]int{}}
	for i := 1; i <= users; i++ {
		t.users = append(t.users, fmt.Sprintf("chaos-%s-u%d", nonce, i))
	}
	for i := 1; i <= burst; i++ {
		t.burst = append(t.burst, fmt.Sprintf("chaos-%s-b%d", nonce, i))
	}
	return t
}

// Conversations are every user's, closed-loop and burst.
func (t *Traffic) Conversations() []string {
	return append(append(append([]string(nil), t.users...), t.burst...), t.extra...)
}

// Burst posts one message from each burst user, spread evenly over
// spread, starting now: messages that reach the leader while it dies or
// stops, which a slow steady flow rarely does.
func (t *Traffic) Burst(round string, spread time.Duration) {
	var wg sync.WaitGroup
	for i, u := range t.burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * spread / time.Duration(max(1, len(t.burst))))
			t.Post(round, u, false)
		}()
	}
	wg.Wait()
}

// Post sends one message from user and records it.
func (t *Traffic) Post(round, user string, probe bool) *Msg {
	t.mu.Lock()
	t.counter[user]++
	n := t.counter[user]
	t.mu.Unlock()
	q := fmt.Sprintf("chaos %s %s q #%d", round, user, n)
	if probe {
		q = t.shortQuestion(fmt.Sprintf("chaos %s %s probe #%d", round, user, n))
	}
	m := &Msg{Round: round, User: user, Probe: probe, Question: q, PostedAt: time.Now()}
	r, err := t.c.PostMessage(t.bot, user, m.Question)
	if err != nil {
		m.PostErr = err.Error()
	} else {
		m.MsgID, m.Delivered = r.MsgID, r.Delivered
	}
	t.mu.Lock()
	t.msgs = append(t.msgs, m)
	t.mu.Unlock()
	return m
}

// conv is m's conversation: the chat whose transcript holds its answer.
func (m *Msg) conv() string {
	if m.Chat != "" {
		return m.Chat
	}
	return m.User
}

// PostGroup posts one message of user in group chat: judged, as every
// message, in that chat's transcript.
func (t *Traffic) PostGroup(round, user, chat string) *Msg {
	t.mu.Lock()
	t.counter[chat+"/"+user]++
	n := t.counter[chat+"/"+user]
	t.mu.Unlock()
	m := &Msg{Round: round, User: user, Chat: chat, Question: fmt.Sprintf("chaos %s %s in %s q #%d", round, user, chat, n), PostedAt: time.Now()}
	r, err := t.c.PostGroupMessage(t.bot, user, chat, m.Question)
	if err != nil {
		m.PostErr = err.Error()
	} else {
		m.MsgID, m.Delivered = r.MsgID, r.Delivered
	}
	t.mu.Lock()
	t.msgs = append(t.msgs, m)
	t.mu.Unlock()
	return m
}

// shortQuestion is base with a suffix that makes its answer one of the
// quickest: a probe asks whether its conversation still takes a question,
// which an answer at the short end of the range says as well as one of a
// minute, and the round is that much shorter (the traffic's questions keep
// the whole range).
func (t *Traffic) shortQuestion(base string) string {
	quick := t.demo.AnswerTime + (t.demo.AnswerTimeMax-t.demo.AnswerTime)/10
	for i := 0; i < 1000; i++ {
		q := fmt.Sprintf("%s.%d", base, i)
		if ai.DemoAnswerTime(t.demo, q) <= quick {
			return q
		}
	}
	return base
}

// Run drives every user until ctx ends. It returns when all have stopped
// (a user waiting for an answer stops waiting at once).
func (t *Traffic) Run(ctx context.Context, round string) {
	var wg sync.WaitGroup
	for i, u := range t.users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Stagger the first messages so they do not all start together.
			if !sleepCtx(ctx, time.Duration(i)*t.think/time.Duration(len(t.users))) {
				return
			}
			// asked is the user's last question that got no busy refusal:
			// told "the previous question is still being worked on", a
			// person waits for that answer (up to their patience) before
			// asking again, rather than repeating at once.
			var asked *Msg
			for ctx.Err() == nil {
				m := t.next(round, u)
				switch {
				case m.Delivered:
					v := t.waitAnswer(ctx, m, t.wait)
					if v.Busy > 0 && v.Complete == 0 && asked != nil {
						t.waitAnswer(ctx, asked, t.wait)
					} else {
						asked = m
					}
				case m.PostErr == "":
					// WeCom took it but had no connection to give it to:
					// the user sees nothing, waits a little, asks again.
					t.waitAnswer(ctx, m, max(5*time.Second, 3*t.think))
				}
				jitter := time.Duration(rand.Int64N(int64(t.think) + 1))
				if !sleepCtx(ctx, t.think/2+jitter) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// next posts user's next closed-loop message: every mediaEvery-th a
// question quoting a small file.
func (t *Traffic) next(round, user string) *Msg {
	t.mu.Lock()
	media := t.mediaEvery > 0 && (t.counter[user]+1)%t.mediaEvery == 0
	t.mu.Unlock()
	if media {
		return t.PostMedia(round, user, 2048, "")
	}
	return t.Post(round, user, false)
}

// waitAnswer waits up to wait for m's answer (complete, busy or a
// failure notice) and returns what the user saw of it.
func (t *Traffic) waitAnswer(ctx context.Context, m *Msg, wait time.Duration) Verdict {
	deadline := time.Now().Add(wait)
	var v Verdict
	poll := t.poll
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	for time.Now().Before(deadline) {
		if !sleepCtx(ctx, poll) {
			return v
		}
		tr, err := t.c.Transcript(t.bot, m.User)
		if err != nil {
			continue
		}
		if v = Judge(tr, m); v.Answers()+v.Failed > 0 {
			return v
		}
	}
	return v
}

// Messages are the messages of round (all rounds if "").
func (t *Traffic) Messages(round string) []*Msg {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*Msg
	for _, m := range t.msgs {
		if round == "" || m.Round == round {
			out = append(out, m)
		}
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// MessagesOf is Messages of round (every round: "") in user's
// conversation, probes excluded.
func (t *Traffic) MessagesOf(round, user string) []*Msg {
	var out []*Msg
	for _, m := range t.Messages(round) {
		if m.User == user && !m.Probe {
			out = append(out, m)
		}
	}
	return out
}
