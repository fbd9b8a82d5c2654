package ai

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/config"
)

const (
	// demoTick is the pace of deltas: one piece per tick, so a 10 s answer
	// arrives in about 200 small pieces whatever its size.
	demoTick = 50 * time.Millisecond
)

type demoBackend struct {
	cfg   DemoConfig
	clock clock.Clock // nil: clock.Real
}

// newDemo builds the demo backend of a validated cfg
// (config.AIDemo.validate), its defaults filled in.
func newDemo(cfg DemoConfig) *demoBackend {
	if cfg.AnswerTime == 0 {
		cfg.AnswerTime = config.DemoDefaultAnswerTime
	}
	if cfg.Paragraphs == 0 {
		cfg.Paragraphs = config.DemoDefaultParagraphs
	}
	return &demoBackend{cfg: cfg}
}

func (b *demoBackend) Name() string { return KindDemo }

// answerTime is how long question's answer streams (DemoAnswerTime).
func (b *demoBackend) answerTime(question string) time.Duration {
	return DemoAnswerTime(b.cfg, question)
}

// DemoAnswerTime is how long the demo backend configured by cfg streams
// question's answer: AnswerTime, or a point of [AnswerTime,
// AnswerTimeMax] fixed by the question's hash. A harness that knows the
// configuration knows each answer's time in advance.
func DemoAnswerTime(cfg DemoConfig, question string) time.Duration {
	spread := cfg.AnswerTimeMax - cfg.AnswerTime
	if spread <= 0 {
		return cfg.AnswerTime
	}
	h := fnv.New64a()
	h.Write([]byte(question))
	return cfg.AnswerTime + time.Duration(h.Sum64()%uint64(spread+1))
}

// Stream emits the answer in pieces at evenly spaced ticks: piece k ends at
// byte len*k/steps (moved back to a rune boundary) and is due at
// start + AnswerTime*k/steps, so a slow consumer catches up instead of
// stretching the answer.
func (b *demoBackend) Stream(ctx context.Context, req Request, emit func(string) error) error {
	if err := req.validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// With files, their account comes first; without, the text is
	// DemoAnswer's alone, byte for byte.
	text := DemoAttachments(req.Attachments) + DemoAnswer(req.Question(), b.cfg.Paragraphs, b.cfg.AnswerBytes)
	answerTime := b.answerTime(req.Question())
	steps := int(answerTime / demoTick)
	steps = max(1, min(steps, len(text)))

	clk := clock.Or(b.clock)
	start := clk.Now()
	timer := clk.NewTimer(time.Hour)
	defer timer.Stop()
	sent := 0
	for k := 1; k <= steps; k++ {
		due := start.Add(time.Duration(int64(answerTime) * int64(k) / int64(steps)))
		timer.Reset(due.Sub(clk.Now()))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C():
		}
		end := len(text) * k / steps
		for end < len(text) && !utf8.RuneStart(text[end]) {
			end--
		}
		if end <= sent {
			continue
		}
		if err := emit(text[sent:end]); err != nil {
			return err
		}
		sent = end
	}
	// The rich part, for the words that ask for one (demo_reply.go); a
	// caller that takes text only (ErrNoReplySink) gets the text.
	if r := DemoReply(req.Question()); !r.Empty() {
		if err := SendReply(ctx, r); err != nil && !errors.Is(err, ErrNoReplySink) {
			return err
		}
	}
	return nil // the last step ends at len(text)
}

// DemoAnswer is the demo backend's whole answer to question: the line
// "You asked: <question>", a blank line, then paragraphs numbered "1. ",
// "2. "… separated by blank lines, at least answerBytes long. The text
// depends only on its arguments; bytes of question that are not UTF-8
// are quoted as U+FFFD.
func DemoAnswer(question string, paragraphs, answerBytes int) string {
	question = strings.ToValidUTF8(question, "\uFFFD")
	paragraphs = max(paragraphs, 1)
	topic := demoTopic(question)
	h := fnv.New64a()
	h.Write([]byte(question))
	seed := h.Sum64()

	// Sentence n of the answer: template and aspect chosen by the question's
	// hash, so different questions read differently but never randomly.
	sentence := func(n int) string {
		x := seed + uint64(n)*0x9E3779B97F4A7C15
		x ^= x >> 29
		t := demoTemplates[x%uint64(len(demoTemplates))]
		a := demoAspects[(x>>8)%uint64(len(demoAspects))]
		return fmt.Sprintf(t, topic, a)
	}
	body := make([][]string, paragraphs)
	n := 0
	// size is the text's length once joined: the header line, and per
	// paragraph "\n<n>. " + sentences joined by spaces + "\n".
	size := len("You asked: ") + len(question) + 1
	for p := range body {
		for range 3 {
			s := sentence(n)
			n++
			body[p] = append(body[p], s)
			size += len(s) + 1
		}
		size += len(strconv.Itoa(p+1)) + 3 // "\n<n>. " and "\n", less one space
	}
	for p := 0; size < answerBytes; p = (p + 1) % paragraphs {
		s := sentence(n)
		n++
		body[p] = append(body[p], s)
		size += len(s) + 1
	}

	var sb strings.Builder
	sb.Grow(size + 16)
	sb.WriteString("You asked: ")
	sb.WriteString(question)
	sb.WriteString("\n")
	for p, ss := range body {
		sb.WriteString("\n")
		sb.WriteString(strconv.Itoa(p + 1))
		sb.WriteString(". ")
		sb.WriteString(strings.Join(ss, " "))
		sb.WriteString("\n")
	}
	return sb.String()
}

// demoTopic is the question as a short phrase to quote in sentences: spaces
// collapsed, at most 40 runes.
func demoTopic(question string) string {
	words := strings.Fields(question)
	t := strings.Join(words, " ")
	if utf8.RuneCountInString(t) > 40 {
		r := []rune(t)
		t = string(r[:40]) + "…"
	}
	if t == "" {
		t = "this"
	}
	return "“" + t + "”"
}

var demoTemplates = []string{
	"Looking at %s through %s, the first thing to settle is what must never go wrong.",
	"For %s, %s is where small decisions add up across thousands of conversations.",
	"A practical answer to %s starts with %s and a way to measure it.",
	"Teams that handle %s well write down how %s is checked, not only how it is built.",
	"The common mistake with %s is to treat %s as an afterthought.",
	"If %s has to work at scale, %s deserves a test of its own.",
	"One way to think about %s: keep %s simple enough to explain in a sentence.",
	"Experience with %s suggests that %s changes more often than expected.",
}

var demoAspects = []string{
	"cost", "reliability", "latency", "day-to-day operations", "security",
	"the user's experience", "failure modes", "growth over time",
}
