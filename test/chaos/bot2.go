package main

import (
	"context"
	"fmt"
	"time"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/test/e2e/cluster"
)

// The second bot: every node serves bot2 beside bot, and Config.Users2
// closed-loop users talk to it through every round. No fault aims at it
// (the scenarios pick bot's leader); whatever a fault does to its node
// does to bot2 where the balancer put it there, and its users' messages
// are judged as bot's: none lost, none twice, none locked, no quota
// breach, no stream expired. Its kicks are noted, not judged (a fault
// that forces one on bot's leader forces it on bot2 too when they share
// a node).
//
// Any bot beside bot is judged the same way (sideBot, judgeBots): bot2
// in every round, and the many-bots scenario's hundred (manybots.go).

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

// sideBot is one bot beside bot whose closed-loop users a round judges
// as bot's (judgeBots).
type sideBot struct {
	bot    string
	t      *Traffic
	before cluster.SimStats // its counters when the round began
	// kicksOK: the kicks the round's faults force on it (more are
	// ping-pong); -1: its kicks are noted, not judged.
	kicksOK int64
	// removed: taken out of the bot registry during the round, its users
	// stopped first. It is not probed (no node serves it); a delivered
	// message without an answer is not lost when the removal listed its
	// task as owed (listed: msgids), and one WeCom took while no
	// connection got it is owed nothing (no node will read it).
	removed bool
	listed  map[string]bool
}

// judge2 judges the second bot's round into r (nothing without one).
func (h *Harness) judge2(r *RoundResult, label string, before cluster.SimStats) {
	if h.Traffic2 == nil {
		return
	}
	h.judgeBots(r, label, []*sideBot{{bot: bot2, t: h.Traffic2, before: before, kicksOK: -1}})
}

// judgeBots probes every conversation of every bot in sides once, all at
// once (a busy refusal of a probe is judged a lock, without bot's second
// probe: no fault holds these conversations), waits for the probes'
// answers, and judges each bot's round into r: violations named
// "<bot>/<user>", a kick beyond kicksOK a ping-pong violation.
func (h *Harness) judgeBots(r *RoundResult, label string, sides []*sideBot) {
	probes := map[*sideBot][]*Msg{}
	for _, s := range sides {
		if s.removed {
			continue
		}
		for _, u := range s.t.Conversations() {
			probes[s] = append(probes[s], s.t.Post(label, u, true))
		}
	}
	deadline := time.Now().Add(h.Cfg.longest() + 45*time.Second)
	for len(probes) > 0 && time.Now().Before(deadline) {
		for s, ps := range probes {
			if allAnswered(h.C, s.bot, ps) {
				delete(probes, s)
			}
		}
		time.Sleep(time.Second)
	}
	for _, s := range sides {
		h.judgeBot(r, label, s)
	}
}

// judgeBot judges one side bot's round (its probes answered or given up).
func (h *Harness) judgeBot(r *RoundResult, label string, s *sideBot) {
	msgs := s.t.Messages(label)
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
	// The fault's expected failures are msgids, unique across bots: a side
	// bot's question that the fault made impossible to answer (its
	// nodes' backend cut mid-answer) is judged as the first bot's is.
	j, err := judgeRound(h.C, s.bot, msgs, s.t.Messages(""), r.ExpectFailed)
	if err != nil && r.Err == "" {
		r.Err = s.bot + ": " + err.Error()
	}
	r.Answered += j.answered
	r.Busy += j.busy
	r.Marked += j.marked
	r.FailedTold += j.failed
	kept, listed, unowed := s.violations(j.violations)
	r.Violations = append(r.Violations, kept...)
	if listed+unowed > 0 {
		r.note("%s (removed): %d unanswered messages listed as owed by its removal, %d never delivered (owed nothing)", s.bot, listed, unowed)
	}
	st, err := h.C.Stats(s.bot)
	if err != nil {
		return
	}
	r.Quota += st.QuotaRejections - s.before.QuotaRejections
	r.Expired += st.ExpiredUpdates - s.before.ExpiredUpdates
	switch k := st.Kicks - s.before.Kicks; {
	case s.kicksOK < 0 && k > 0:
		r.note("%s: %d kicks (not judged)", s.bot, k)
	case s.kicksOK >= 0 && k > s.kicksOK:
		r.Violations = append(r.Violations, Violation{Invariant: InvPingPong, User: s.bot,
			Saw: fmt.Sprintf("%d kicks at the simulator during the round, %d forced by the faults", k, s.kicksOK)})
	}
}

// violations are vs as the side bot's: named "<bot>/<user>", less those
// its removal excuses (removed: a lost message its removal listed as
// owed, counted in listed; one never delivered, counted in unowed).
func (s *sideBot) violations(vs []Violation) (kept []Violation, listed, unowed int) {
	for _, v := range vs {
		switch {
		case s.removed && v.Invariant == InvLost && s.listed[v.MsgID]:
			listed++
			continue
		case s.removed && v.Invariant == InvMissed:
			unowed++
			continue
		}
		v.User = s.bot + "/" + v.User
		kept = append(kept, v)
	}
	return kept, listed, unowed
}

// stats2 is the second bot's counters now (zero without one).
func (h *Harness) stats2() cluster.SimStats {
	if h.Traffic2 == nil {
		return cluster.SimStats{}
	}
	st, _ := h.C.Stats(bot2)
	return st
}

// judgeAgain2 is judgeAgain's final check of the second bot's messages:
// its duplicates not found in their round (roundOf: msgid+invariant of
// every round's violations).
func (h *Harness) judgeAgain2(roundOf, expect map[string]bool) []Violation {
	if h.Traffic2 == nil {
		return nil
	}
	j, err := judgeRound(h.C, bot2, h.Traffic2.Messages(""), h.Traffic2.Messages(""), expect)
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
