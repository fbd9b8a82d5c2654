package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Load posts rate messages a second, open loop, until ctx ends: message
// k goes to conversation k mod convs (chaos-<nonce>-l<i>), so each
// conversation gets one every convs/rate seconds whatever the answers
// do. The questions are the quickest of the demo's range (as a probe's):
// at 100 a second most conversations are free again by their next
// message, and one still busy gets the busy refusal, an answer too.
// Every message is recorded, judged as the steady users' are, and its
// conversation probed after the round.
func (t *Traffic) Load(ctx context.Context, round string, convs, rate int) {
	users := make([]string, convs)
	t.mu.Lock()
	for i := range users {
		users[i] = fmt.Sprintf("chaos-%s-l%d", t.nonce, i+1)
		t.addConversation(users[i])
	}
	t.mu.Unlock()
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	for k := 0; ; k++ {
		if !sleepCtx(ctx, time.Until(start.Add(time.Duration(k)*time.Second/time.Duration(rate)))) {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.postQuick(round, users[k%convs])
		}()
	}
}

// postQuick is Post with a question of the quickest answers.
func (t *Traffic) postQuick(round, user string) *Msg {
	t.mu.Lock()
	t.counter[user]++
	n := t.counter[user]
	t.mu.Unlock()
	m := &Msg{Round: round, User: user, Question: t.shortQuestion(fmt.Sprintf("chaos %s %s q #%d", round, user, n)), PostedAt: time.Now()}
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

// rollingRestartUnderLoad is rolling-restart's deploy (SIGTERM, restart,
// a stable cluster, node by node) while Load posts rate messages a
// second over convs conversations, from lead before the first stop to
// 10 s after the last node is back.
func (h *Harness) rollingRestartUnderLoad(r *RoundResult, convs, rate int, lead time.Duration) error {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Traffic.Load(ctx, fmt.Sprintf("%s-r%d", r.Scenario, r.Round), convs, rate)
	}()
	defer func() { stop(); <-done }()
	r.note("load: %d messages a second over %d conversations", rate, convs)
	time.Sleep(lead)
	for _, id := range h.nodeIDs {
		t0 := time.Now()
		if err := h.stopNode(r, id); err != nil {
			return err
		}
		if _, err := h.C.RestartNode(id); err != nil {
			return fmt.Errorf("restart %s: %w", id, err)
		}
		if _, err := h.C.WaitStable(h.Cfg.Takeover); err != nil {
			return fmt.Errorf("after restarting %s: %w", id, err)
		}
		r.note("%s restarted, cluster stable %.1fs after its SIGTERM", id, time.Since(t0).Seconds())
	}
	time.Sleep(10 * time.Second)
	return nil
}
