package pusher

// The backend's thinking, as the user reads it: WeCom folds a
// <think>…</think> block at the head of a stream's content into a
// "thinking" section (docs/messages.md). What of it a bot shows is its
// ai.show_thinking (Config.Thinking): the model's reasoning and its tool
// steps, the tool steps alone, or nothing.
//
// The block costs no frame: it is part of the content of the frames the
// pusher sends anyway (progress, close and final frames, paced and
// budgeted as without it). A change of the thinking alone is new content
// for a progress frame, as a change of the text is. The block is closed
// in every frame (each frame's content replaces the last whole), first,
// and the answer proper follows it. It is at most MaxThinkingShown bytes
// of thinking, the latest (a longer one starts with "…"); the final
// frame shows it only as far as the first part of the answer leaves room,
// so the answer's parts are the same with it or without it.

import (
	"strings"
	"unicode/utf8"

	"github.com/botctl/botctl/pkg/task"
)

// MaxThinkingShown bounds the thinking a frame shows, in bytes.
const MaxThinkingShown = 4 << 10

// Thinking says what a bot shows of the thinking: "true" (reasoning and
// tool steps), "tools" (tool steps alone), anything else nothing (the
// values of config's ai.show_thinking, as they are now).
type Thinking interface {
	ShowThinking(bot string) string
}

// thinkingOf is what of out's thinking this bot's user reads ("" none).
func (p *Pusher) thinkingOf(out *task.Output) string {
	if out == nil || p.cfg.Thinking == nil {
		return ""
	}
	switch p.cfg.Thinking.ShowThinking(p.cfg.Bot) {
	case "true":
		return out.Thinking
	case "tools":
		return out.Tools
	}
	return ""
}

// view is what a progress frame shows of out: its thinking's block and
// its text; out's text alone when no thinking is shown.
func (p *Pusher) view(out *task.Output) string {
	if out == nil {
		return ""
	}
	return withThinking(p.thinkingOf(out), out.Text, MaxThinkingShown)
}

// hashes are task.Hash of out's text, its view and the view's hash (the
// text and its hash when no thinking is shown).
func (p *Pusher) hashes(out *task.Output) (textHash, view, viewHash string) {
	textHash, view = task.Hash(out.Text), p.view(out)
	if view == out.Text {
		return textHash, out.Text, textHash
	}
	return textHash, view, task.Hash(view)
}

// withThinking is text after the block of thinking's last limit bytes
// at most (text alone when thinking is empty or no room is left).
func withThinking(thinking, text string, limit int) string {
	thinking = strings.TrimSpace(thinking)
	if thinking == "" {
		return text
	}
	const open, closing, sep = "<think>", "</think>", "\n\n"
	limit -= len(open) + len(closing) + len(sep)
	if limit < 32 { // too little to say anything
		return text
	}
	if len(thinking) > limit {
		cut := len(thinking) - (limit - len("…"))
		for cut < len(thinking) && !utf8.RuneStart(thinking[cut]) {
			cut++
		}
		thinking = "…" + thinking[cut:]
	}
	block := open + thinking + closing
	if text == "" {
		return block
	}
	return block + sep + text
}

// finalWithThinking is the final frame's content: first, the answer's
// first part, after as much of the thinking's block as the frame has
// room for.
func (p *Pusher) finalWithThinking(out *task.Output, first string, max int) string {
	return withThinking(p.thinkingOf(out), first, min(MaxThinkingShown, max-len(first)))
}
