package main

import (
	"fmt"
	"strings"

	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/test/e2e/cluster"
)

// Verdict is what one user message got, read from the simulator's
// transcript of its conversation (what the user saw), never from botctl.
type Verdict struct {
	// Complete counts finished bot messages holding the whole expected
	// answer: a stream reply or a proactive push. Exactly 1 is correct.
	Complete int
	// Related are the bot messages that answer this one: reply_to is its
	// msgid, or the content quotes its question.
	Related []cluster.TranscriptEntry
	// Expired counts related streams the simulator marked expired (a frame
	// came after the stream window).
	Expired int
	// Busy counts finished replies saying the conversation already has a
	// task running: a business refusal, a correct answer by the red line.
	Busy int
	// Failed counts finished bot messages answering this one with the
	// failure notice and no complete answer (the task was given up).
	Failed int
	// StorageFull counts finished replies to a media message (Msg.Media)
	// saying its file was refused because the media store is full: the
	// user is told, a correct answer.
	StorageFull int
	// FileRefused counts finished replies to a media message saying its
	// file was not taken for another reason (not stored while JetStream
	// failed, a download that failed): the user is told and asked to send
	// it again, a correct answer under a fault.
	FileRefused int
	// Marked: a bot message after this one in its conversation starts
	// with the "may be incomplete" note (the backfill could not fill a gap
	// and says so). It is the explicit mark a missed message may get
	// instead of an answer.
	Marked bool
}

// Texts of pkg/access's and pkg/pusher's default replies (not imported:
// the check must not move when those packages do).
const (
	busyText       = "上一个问题还在处理中"
	failedText     = "这个问题处理失败了"
	incompleteText = "系统故障期间你发送的部分消息可能未被处理"
)

// Judge finds m's answers in tr. The demo backend's answer is
// deterministic (ai.DemoAnswer), so "complete" is exact: the whole
// expected text in a finished stream or a push, whatever the pusher put
// around it (receipt, truncation note).
func Judge(tr []cluster.TranscriptEntry, m *Msg) Verdict {
	want := strings.TrimSpace(ai.DemoAnswer(m.Question, 3, 0))
	quote := "You asked: " + m.Question + "\n"
	// A push replies to nothing; one that carries no answer (a late busy
	// reply, a failure notice) names its question as a markdown quote.
	quoted := "> " + strings.Join(strings.Fields(m.Question), " ")
	var v Verdict
	var asked int64 = -1 // m's seq in the transcript
	for _, e := range tr {
		if e.From == "user" && m.MsgID != "" && e.MsgID == m.MsgID {
			asked = e.Seq
		}
		if e.From != "bot" {
			continue
		}
		if asked >= 0 && e.Seq > asked && strings.Contains(e.Content, incompleteText) {
			v.Marked = true
		}
		replies := m.MsgID != "" && e.ReplyTo == m.MsgID
		quotes := e.Kind == "markdown" && strings.HasPrefix(e.Content, quoted+"\n")
		if !replies && !quotes && !strings.Contains(e.Content, quote) {
			continue
		}
		v.Related = append(v.Related, e)
		if e.Expired {
			v.Expired++
		}
		done := e.Finished || e.Kind == "markdown"
		switch {
		case done && strings.Contains(e.Content, want):
			v.Complete++
		case done && (replies || quotes) && strings.Contains(e.Content, busyText):
			v.Busy++
		case done && m.Media && (replies || quotes) && strings.Contains(e.Content, storageFullText):
			v.StorageFull++
		case done && m.Media && (replies || quotes) && (strings.Contains(e.Content, fileRefusedText) || strings.Contains(e.Content, mediaUnavailableText)):
			v.FileRefused++
		case done && strings.Contains(e.Content, failedText):
			v.Failed++
		}
	}
	return v
}

// Saw says in one line what the user was shown for a message.
func (v Verdict) Saw() string {
	if len(v.Related) == 0 {
		return "nothing: no bot message replies to it or quotes it"
	}
	var parts []string
	for _, e := range v.Related {
		state := "open"
		switch {
		case e.Expired:
			state = "expired"
		case e.Finished:
			state = "finished"
		}
		parts = append(parts, fmt.Sprintf("seq %d %s %s (%d B): %q", e.Seq, e.Kind, state, len(e.Content), snippet(e.Content, 90)))
	}
	return strings.Join(parts, "; ")
}

func snippet(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n/2]) + " … " + string(r[len(r)-n/2:])
	}
	return s
}

// Violation is one broken invariant, with enough to find it again.
type Violation struct {
	Invariant string // lost, duplicate, locked, expired, post_error
	User      string
	MsgID     string
	Question  string
	Saw       string
}

// Invariant names, in report order.
const (
	InvLost      = "lost"      // a delivered message got no complete answer
	InvFailed    = "failed"    // … only a failure notice, where the fault did not make an answer impossible
	InvDuplicate = "duplicate" // … got more than one
	InvLocked    = "locked"    // a probe after the round got no answer
	InvMissed    = "missed"    // WeCom took a message while no bot was connected; no answer ever came (backfill owes it)
	InvExpired   = "expired"   // a stream was updated after its window
	InvQuota     = "quota"     // 45009 rejections counted by the simulator
	InvPingPong  = "ping-pong" // the simulator replaced a live connection (kick)
	// InvUnserved: a bot added to the registry at run time not served
	// within its bound, or a rotated secret not proved (many-bots).
	InvUnserved = "unserved"
)

// Answers returns how many answers the user got: complete ones, busy
// refusals and a media message's reply that its file was not taken.
func (v Verdict) Answers() int { return v.Complete + v.Busy + v.StorageFull + v.FileRefused }

// judgement is judgeRound's result.
type judgement struct {
	answered   int // delivered messages answered exactly once
	busy       int // … of which by a busy refusal
	marked     int // missed messages whose conversation was marked "may be incomplete" after them
	failed     int // expected failures told once
	violations []Violation
}

// judgeRound checks every message of the round against the transcripts
// (read once per conversation).
//
// all are every message of the run: a locked conversation's report names
// the earlier messages still without an answer (the likely holder).
// expectFailed are msgids the fault made impossible to answer: exactly
// one failure notice (or, had the fault come too late, one complete
// answer) is correct for them.
func judgeRound(c *cluster.Cluster, bot string, msgs, all []*Msg, expectFailed map[string]bool) (judgement, error) {
	trs := map[string][]cluster.TranscriptEntry{}
	for _, m := range msgs {
		if _, ok := trs[m.conv()]; ok {
			continue
		}
		tr, err := c.Transcript(bot, m.conv())
		if err != nil {
			return judgement{}, fmt.Errorf("transcript of %s: %w", m.conv(), err)
		}
		trs[m.conv()] = tr
	}
	return judgeTranscripts(trs, msgs, all, expectFailed), nil
}

// judgeTranscripts is judgeRound on transcripts already read (trs:
// conversation (a single chat's user, or a group chat) → its transcript,
// one for every conversation of msgs).
func judgeTranscripts(trs map[string][]cluster.TranscriptEntry, msgs, all []*Msg, expectFailed map[string]bool) (j judgement) {
	for _, m := range msgs {
		if m.PostErr != "" {
			continue // WeCom never took it: nothing is owed
		}
		v := Judge(trs[m.conv()], m)
		viol := Violation{User: m.conv(), MsgID: m.MsgID, Question: m.Question, Saw: v.Saw()}
		n := v.Answers()
		if expectFailed[m.MsgID] {
			n += v.Failed
		}
		switch {
		case m.Probe && m.Reprobed && v.Complete == 0:
			// Refused while the conversation owed an earlier answer; the
			// probe after it is judged.
		case m.Probe && v.Complete != 1:
			// A probe comes after every answer of the round had time to
			// arrive: a busy refusal now means a conversation still locked.
			viol.Invariant = InvLocked
			if v.Complete > 1 {
				viol.Invariant = InvDuplicate
			}
			viol.Saw = fmt.Sprintf("%d complete answers and %d busy refusals: %s", v.Complete, v.Busy, viol.Saw)
			if held := unanswered(trs[m.conv()], all, m); held != "" {
				viol.Saw += "; still unanswered before it in this conversation: " + held
			}
			j.violations = append(j.violations, viol)
		case n == 1:
			if m.Delivered {
				j.answered++
				j.busy += v.Busy
			}
			if expectFailed[m.MsgID] && v.Failed == 1 {
				j.failed++
			}
		case n == 0 && v.Failed > 0:
			// Told it failed: explicit, but not the answer owed.
			viol.Invariant = InvFailed
			j.violations = append(j.violations, viol)
		case n == 0 && !m.Delivered && v.Marked:
			// Missed, and the user was told so: the explicit mark the
			// architecture allows instead of an answer.
			j.marked++
		case n == 0 && !m.Delivered:
			// In WeCom's history, never delivered: the architecture's
			// backfill must answer it or mark it "may be incomplete".
			viol.Invariant = InvMissed
			j.violations = append(j.violations, viol)
		case n == 0:
			viol.Invariant = InvLost
			j.violations = append(j.violations, viol)
		default:
			viol.Invariant = InvDuplicate
			viol.Saw = fmt.Sprintf("%d complete answers, %d busy refusals and %d failure notices: %s", v.Complete, v.Busy, v.Failed, viol.Saw)
			j.violations = append(j.violations, viol)
		}
		if v.Expired > 0 {
			viol.Invariant = InvExpired
			j.violations = append(j.violations, viol)
		}
	}
	return j
}

// unanswered lists the delivered messages of probe's conversation, posted
// before it, that have no answer in tr.
func unanswered(tr []cluster.TranscriptEntry, all []*Msg, probe *Msg) string {
	var out []string
	for _, m := range all {
		if m.conv() != probe.conv() || m == probe || !m.Delivered || !m.PostedAt.Before(probe.PostedAt) {
			continue
		}
		if v := Judge(tr, m); v.Answers() == 0 {
			out = append(out, fmt.Sprintf("%s (%q, posted %s): %s", m.MsgID, m.Question, m.PostedAt.UTC().Format("15:04:05"), v.Saw()))
		}
	}
	return strings.Join(out, "; ")
}

// allAnswered is true when every message WeCom took has an answer (or a
// failure notice), and every one it took but never delivered also has
// one or its "may be incomplete" mark: the backfill answers those after
// the bot is back, so the settle wait must wait for them too.
func allAnswered(c *cluster.Cluster, bot string, msgs []*Msg) bool {
	trs := map[string][]cluster.TranscriptEntry{}
	for _, m := range msgs {
		if m.PostErr != "" {
			continue
		}
		tr, ok := trs[m.conv()]
		if !ok {
			var err error
			if tr, err = c.Transcript(bot, m.conv()); err != nil {
				return false
			}
			trs[m.conv()] = tr
		}
		if v := Judge(tr, m); v.Answers()+v.Failed == 0 && !v.Marked {
			return false
		}
	}
	return true
}

// refusedBusy: probe p was answered with a busy refusal only.
func refusedBusy(c *cluster.Cluster, bot string, p *Msg) bool {
	tr, err := c.Transcript(bot, p.conv())
	if err != nil {
		return false
	}
	v := Judge(tr, p)
	return v.Complete == 0 && v.Busy > 0
}
