package main

import (
	"context"
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/ai"
)

// The second bot: every node serves bot2 beside bot, and Config.Users2
// closed-loop users talk to it through every round. No fault aims at it
// (the scenarios pick bot's leader); whatever a fault does to its node
// does to bot2 where the balancer put it there, and its users' messages
// are judged as bot's: none lost, none twice, none locked, no quota
// breach, no stream expired. Its kicks are noted, not judged (a fault
// that forces one on bot's leader forces it on bot2 too when they share
// a node).

const bot2 = "b2"

// bots are the bots every node serves.
func (c *Config) bots() []string {
	if c.Users2 > 0 {
		return []string{bot, bot2}
	}
	return []string{bot}
}

// startTraffic2 makes the second bot's traffic (nil without one).
func (h *Harness) startTraffic2(nonce string) {
	if h.Cfg.Users2 <= 0 {
		return
	}
	h.Traffic2 = NewTraffic(h.C, bot2, h.Cfg.Users2, 0, h.Cfg.Think, h.Cfg.Patience, nonce)
	h.Traffic2.demo = ai.DemoConfig{AnswerTime: h.Cfg.AnswerTime, AnswerTimeMax: h.Cfg.AnswerTimeMax}
	h.Traffic2.mediaEvery = h.Cfg.MediaEvery
}

// run2 drives the second bot's users until ctx ends (at once without one).
func (h *Harness) run2(ctx context.Context, label string) {
	if h.Traffic2 != nil {
		h.Traffic2.Run(ctx, label)
	}
}

// answered2 reports whether every message of the second bot's round is
// answered (true without one).
func (h *Harness) answered2(label string) bool {
	return h.Traffic2 == nil || allAnswered(h.C, bot2, h.Traffic2.Messages(label))
}

// judge2 probes each of the second bot's conversations once (a busy
// refusal of a probe is judged a lock, without bot's second probe: no
// fault holds bot2's conversations) and judges its round's messages into
// r, violations named "b2/<user>".
func (h *Harness) judge2(r *RoundResult, label string, before int64, beforeQuota, beforeExpired int64) {
	if h.Traffic2 == nil {
		return
	}
	var probes []*Msg
	for _, u := range h.Traffic2.Conversations() {
		probes = append(probes, h.Traffic2.Post(label, u, true))
	}
	deadline := time.Now().Add(h.Cfg.longest() + 45*time.Second)
	for !allAnswered(h.C, bot2, probes) && time.Now().Before(deadline) {
		time.Sleep(time.Second)
	}
	msgs := h.Traffic2.Messages(label)
	for _, m := range msgs {
		r.Msgs++
		switch {
		case m.PostErr != "":
			r.PostErrors++
		case m.Delivered:
			r.Delivered++
		default:
			r.Undelivered++
		}
	}
	j, err := judgeRound(h.C, bot2, msgs, h.Traffic2.Messages(""), nil)
	if err != nil && r.Err == "" {
		r.Err = bot2 + ": " + err.Error()
	}
	r.Answered += j.answered
	r.Busy += j.busy
	r.Marked += j.marked
	for _, v := range j.violations {
		v.User = bot2 + "/" + v.User
		r.Violations = append(r.Violations, v)
	}
	if st, err := h.C.Stats(bot2); err == nil {
		r.Quota += st.QuotaRejections - beforeQuota
		r.Expired += st.ExpiredUpdates - beforeExpired
		if k := st.Kicks - before; k > 0 {
			r.note("%s: %d kicks (not judged)", bot2, k)
		}
	}
}

// stats2 is the second bot's kicks, 45009s and expired updates now.
func (h *Harness) stats2() (kicks, quota, expired int64) {
	if h.Traffic2 == nil {
		return 0, 0, 0
	}
	st, err := h.C.Stats(bot2)
	if err != nil {
		return 0, 0, 0
	}
	return st.Kicks, st.QuotaRejections, st.ExpiredUpdates
}

// judgeAgain2 is judgeAgain's final check of the second bot's messages:
// its duplicates not found in their round (roundOf: msgid+invariant of
// every round's violations).
func (h *Harness) judgeAgain2(roundOf map[string]bool) []Violation {
	if h.Traffic2 == nil {
		return nil
	}
	j, err := judgeRound(h.C, bot2, h.Traffic2.Messages(""), h.Traffic2.Messages(""), nil)
	if err != nil {
		return []Violation{{Invariant: "final check", User: bot2, Saw: fmt.Sprint(err)}}
	}
	var late []Violation
	for _, v := range j.violations {
		if v.Invariant == InvDuplicate && !roundOf[v.MsgID+v.Invariant] {
			v.User = bot2 + "/" + v.User
			late = append(late, v)
		}
	}
	return late
}
