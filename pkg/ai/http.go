package ai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/botctl/botctl/pkg/config"
)

// The http backend: a generic streaming webhook for n8n and home-made
// agents. One POST of an httpRequest; the answer is either server-sent
// events, each data line an httpEvent, ending with {"done": true}, or a
// text/plain body, the answer itself, complete when the body is. The wire
// format, with an example the tests replay, is in docs/ai.md.

// httpReadSize is how much of a text/plain body is read at once.
const httpReadSize = 32 << 10

type httpBackend struct {
	web web
}

// newHTTP builds the http backend of a validated cfg
// (config.AIHTTP.validate): the token is read from its file now.
func newHTTP(cfg HTTPConfig) (*httpBackend, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = config.HTTPDefaultTimeout
	}
	token, err := cfg.Token()
	if err != nil {
		return nil, err
	}
	w, err := newWeb(KindHTTP, cfg.URL, token, "ai.http.token_file", cfg.Timeout, "ai.http.timeout")
	if err != nil {
		return nil, fmt.Errorf("config key ai.http.url: %w", err)
	}
	return &httpBackend{web: w}, nil
}

// Name is "http:<host>": not the path, which may be the webhook's secret.
func (b *httpBackend) Name() string { return b.web.name }

// httpRequest is the body POSTed: who asked where, the question, the files
// sent with it and the conversation's turns before it.
type httpRequest struct {
	Bot         string       `json:"bot"`
	Chat        string       `json:"chat"`
	ChatType    string       `json:"chat_type"`
	User        string       `json:"user"`
	MsgID       string       `json:"msgid"`
	Question    string       `json:"question"`
	Attachments []Attachment `json:"attachments"`
	History     []Message    `json:"history"`
	// Event: the task answers what the user did instead of writing (a
	// click on a card, card.go); absent for a message.
	Event *Event `json:"event,omitempty"`
}

// httpEvent is one data line of an event-stream answer: a delta of text,
// the end, or both. A line may also carry "reply", the rich part of the
// answer (images, files, a card: Reply, docs/ai.md), handed to the caller
// as it comes (SendReply); several lines' replies add up. Any other field
// is ignored.
type httpEvent struct {
	Text  string          `json:"text"`
	Done  bool            `json:"done"`
	Reply json.RawMessage `json:"reply,omitempty"`
	// Usage, on any line, is what the answer cost (usage.go); the last
	// one sent counts.
	Usage *usageObject `json:"usage"`
	// Thinking is a delta of the agent's reasoning, Tool a step of one
	// of its tools (thinking.go): shown folded before the answer.
	Thinking string    `json:"thinking,omitempty"`
	Tool     *ToolStep `json:"tool,omitempty"`
}

// newHTTPRequest is req as the webhook reads it: history is every user and
// assistant turn before the last user message (system messages are the
// node's own prompt, not the conversation's).
func newHTTPRequest(req Request) httpRequest {
	last := len(req.Messages) - 1
	for last >= 0 && req.Messages[last].Role != RoleUser {
		last--
	}
	history := []Message{}
	for _, m := range req.Messages[:max(last, 0)] {
		if m.Role == RoleUser || m.Role == RoleAssistant {
			history = append(history, m)
		}
	}
	attachments := req.Attachments
	if attachments == nil {
		attachments = []Attachment{}
	}
	return httpRequest{Bot: req.Bot, Chat: req.Chat, ChatType: req.ChatType, User: req.User, MsgID: req.MsgID,
		Question: req.Question(), Attachments: attachments, History: history, Event: req.Event}
}

// Stream posts the request and emits the answer as it streams back.
func (b *httpBackend) Stream(ctx context.Context, req Request, emit func(string) error) error {
	if err := req.validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	runCtx, cancel := context.WithTimeoutCause(ctx, b.web.timeout, errAnswerTimeout)
	defer cancel()
	resp, err := b.web.postWith(runCtx, newHTTPRequest(req), "text/event-stream, text/plain", httpHeader(req))
	if err != nil {
		return b.web.classify(ctx, runCtx, req, err)
	}
	defer resp.Body.Close()
	out := &recordEmit{emit: emit}
	switch mt := mediaType(resp); mt {
	case "text/event-stream":
		err = b.events(ctx, resp.Body, out)
	case "text/plain":
		err = b.plain(resp.Body, out)
	default:
		return fmt.Errorf("%w: %s: task %s: the answer's Content-Type is %q: want text/event-stream or text/plain (docs/ai.md, \"http\")", ErrBadRequest, b.Name(), req.TaskID, mt)
	}
	if out.usage != nil {
		ReportUsage(ctx, out.usage.usage())
	}
	if out.err != nil {
		return out.err
	}
	if err != nil {
		return b.web.classify(ctx, runCtx, req, err)
	}
	return nil
}

// httpHeader is what the http backend adds to its POST so that a webhook
// with side effects can act once per task: Idempotency-Key is the task id,
// the same on every attempt (a retry, a redelivery to another node), and
// X-Botctl-Attempt the attempt's number (from 1; absent when unknown). An
// answer is at least once: a webhook that did its side effect and failed
// to answer is asked again under the same key.
func httpHeader(req Request) http.Header {
	h := http.Header{}
	if req.TaskID != "" {
		h.Set("Idempotency-Key", req.TaskID)
	}
	if req.Attempt > 0 {
		h.Set("X-Botctl-Attempt", strconv.Itoa(req.Attempt))
	}
	return h
}

// events reads an event stream to its {"done": true}.
func (b *httpBackend) events(ctx context.Context, body io.Reader, out *recordEmit) error {
	for e, err := range sseEvents(body) {
		if err != nil {
			return err
		}
		data := e.Data
		var ev httpEvent
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return fmt.Errorf("%w: %s: a data line is not a JSON object such as {\"text\": \"…\"}: %s", ErrBackend, b.Name(), b.web.bound(data))
		}
		if ev.Usage != nil {
			out.usage = ev.Usage
		}
		Think(ctx, ev.Thinking)
		if ev.Tool != nil {
			ThinkTool(ctx, *ev.Tool)
		}
		if err := out.send(ev.Text); err != nil {
			return err
		}
		if err := b.reply(ctx, ev.Reply); err != nil {
			return err
		}
		if ev.Done {
			return nil
		}
	}
	return fmt.Errorf("%w: %s: the event stream ended before {\"done\": true}", ErrBackend, b.Name())
}

// plain emits a text/plain body as it comes, holding back a rune split
// between reads; the answer is complete at the body's end. A chunked or
// sized body cut short is a read error (io.ErrUnexpectedEOF); a body that
// ends at close has no end to check.
func (b *httpBackend) plain(body io.Reader, out *recordEmit) error {
	buf := make([]byte, httpReadSize)
	var pending []byte
	for {
		n, err := body.Read(buf)
		if n > 0 {
			pending = append(pending, buf[:n]...)
			if cut := completeUTF8(pending); cut > 0 {
				delta := strings.ToValidUTF8(string(pending[:cut]), "\uFFFD")
				pending = append(pending[:0], pending[cut:]...)
				if err := out.send(delta); err != nil {
					return err
				}
			}
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, io.EOF) {
			return err
		}
		if len(pending) > 0 { // a rune cut short by the end of the body
			return out.send(strings.ToValidUTF8(string(pending), "\uFFFD"))
		}
		return nil
	}
}

// reply hands a data line's "reply" to the caller. A webhook gives bytes
// (data, base64), never a path: a path would name a file on this node.
func (b *httpBackend) reply(ctx context.Context, raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var r Reply
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("%w: %s: \"reply\" is not a reply object ({\"images\": [{\"name\", \"data\": base64}], \"files\": […], \"card\": {…}}, docs/ai.md): %v", ErrBackend, b.Name(), err)
	}
	for _, f := range append(append([]ReplyFile{}, r.Images...), r.Files...) {
		if f.Path != "" {
			return fmt.Errorf("%w: %s: \"reply\" names a path (%q): an http backend sends the bytes as \"data\" (base64)", ErrBackend, b.Name(), f.Path)
		}
	}
	if err := SendReply(ctx, r); err != nil && !errors.Is(err, ErrNoReplySink) {
		return fmt.Errorf("%s: %w", b.Name(), err) // ErrReplyTooLarge: the stream stops here
	}
	return nil
}
