package ai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/botctl/botctl/pkg/config"
)

// The dify backend: Dify's chat API (Chatbot, Agent and Chatflow apps),
// POST <base_url>/chat-messages with "response_mode": "streaming", read as
// Dify documents it: `data: {"event": …}` lines, the answer in the deltas
// of "message" (and, in Agent apps, "agent_message") events, the end in
// "message_end", a failure in an "error" event; "ping" (`event: ping`
// every 10 s) and the rest (agent_thought, message_file, tts_message,
// workflow_* and node_* of a Chatflow) are skipped.
//
// Dify holds the conversation's memory: the request carries the
// conversation_id Dify gave this WeCom conversation's user, kept in
// Sessions, and none of the node's turns. A conversation Dify no longer
// knows (404 "Conversation Not Exists": deleted, another app's) is started
// anew, once, in the same Stream.

type difyBackend struct {
	web      web
	sessions Sessions // nil: every question a new conversation
}

// newDify builds the dify backend of a validated cfg
// (config.AIDify.validate): the API key is read from its file now.
func newDify(cfg DifyConfig, sessions Sessions) (*difyBackend, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = config.DifyDefaultBaseURL
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = config.DifyDefaultTimeout
	}
	key, err := cfg.APIKey()
	if err != nil {
		return nil, err
	}
	w, err := newWeb(KindDify, strings.TrimRight(cfg.BaseURL, "/")+"/chat-messages", key, "ai.dify.api_key_file", cfg.Timeout, "ai.dify.timeout")
	if err != nil {
		return nil, fmt.Errorf("config key ai.dify.base_url: %w", err)
	}
	return &difyBackend{web: w, sessions: sessions}, nil
}

// Name is "dify:<host>".
func (b *difyBackend) Name() string { return b.web.name }

// difyRequest is the body of POST /chat-messages.
type difyRequest struct {
	Inputs         map[string]any `json:"inputs"`
	Query          string         `json:"query"`
	ResponseMode   string         `json:"response_mode"`
	ConversationID string         `json:"conversation_id"`
	User           string         `json:"user"`
}

// difyEvent is one data line of the stream: the fields of the events read.
type difyEvent struct {
	Event          string `json:"event"`
	ConversationID string `json:"conversation_id"`
	Answer         string `json:"answer"` // message, agent_message, message_replace
	// error's
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// agent_thought's: the thought so far and the tool it calls, the
	// tool's result once it returned (observation); one thought (ID) is
	// sent again as it grows.
	ID          string `json:"id"`
	Thought     string `json:"thought"`
	Tool        string `json:"tool"`
	Observation string `json:"observation"`
	// message_end's: metadata.usage (usage.go)
	Metadata struct {
		Usage *usageObject `json:"usage"`
	} `json:"metadata"`
}

// difyUser is the Dify end user: the WeCom user (what Dify ties its
// conversations to, and counts in its logs).
func difyUser(req Request) string {
	switch {
	case req.User != "":
		return req.User
	case req.Chat != "":
		return "chat:" + req.Chat
	}
	return "botctl"
}

// Stream asks Dify and emits the answer's deltas until message_end.
func (b *difyBackend) Stream(ctx context.Context, req Request, emit func(string) error) error {
	if err := req.validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	runCtx, cancel := context.WithTimeoutCause(ctx, b.web.timeout, errAnswerTimeout)
	defer cancel()
	user := difyUser(req)
	stored, known := b.session(ctx, req, user)
	conv := stored
	body := difyRequest{Inputs: difyInputs(req.Event), Query: req.Question(), ResponseMode: "streaming", ConversationID: conv, User: user}
	resp, err := b.web.post(runCtx, body, "text/event-stream")
	if conv != "" && conversationGone(err) {
		conv, body.ConversationID = "", ""
		resp, err = b.web.post(runCtx, body, "text/event-stream")
	}
	if err != nil {
		return b.web.classify(ctx, runCtx, req, err)
	}
	defer resp.Body.Close()
	if mt := mediaType(resp); mt != "text/event-stream" {
		return fmt.Errorf("%w: %s: task %s: the answer's Content-Type is %q, not an event stream: check ai.dify.base_url (Dify's API root, e.g. %s)", ErrBadRequest, b.Name(), req.TaskID, mt, config.DifyDefaultBaseURL)
	}
	out := &recordEmit{emit: emit}
	conv, err = b.events(ctx, resp.Body, out, conv)
	if out.usage != nil {
		ReportUsage(ctx, out.usage.usage())
	}
	if out.err != nil {
		return out.err
	}
	if err != nil {
		return b.web.classify(ctx, runCtx, req, err)
	}
	if known && conv != "" && conv != stored {
		// A failure to store is logged by the store: this answer stands,
		// the next question starts a new conversation.
		sctx, scancel := context.WithTimeout(ctx, sessionCallTimeout)
		_ = b.sessions.SetSession(sctx, req.Bot, req.Chat, user, b.Name(), conv)
		scancel()
	}
	return nil
}

// session is the conversation id stored for the asker, and whether the
// store answered: when it did not, the answer starts a new conversation
// and leaves the stored one alone.
func (b *difyBackend) session(ctx context.Context, req Request, user string) (string, bool) {
	if b.sessions == nil {
		return "", false
	}
	sctx, cancel := context.WithTimeout(ctx, sessionCallTimeout)
	defer cancel()
	id, err := b.sessions.Session(sctx, req.Bot, req.Chat, user, b.Name())
	return id, err == nil
}

// conversationGone reports Dify's 404 for a conversation_id it does not
// know ("Conversation Not Exists.").
func conversationGone(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.status == http.StatusNotFound && strings.Contains(strings.ToLower(se.text), "conversation")
}

// events reads the stream to its message_end and returns the
// conversation's id as the stream gave it.
func (b *difyBackend) events(ctx context.Context, body io.Reader, out *recordEmit, conv string) (string, error) {
	thoughts := difyThoughts{}
	for e, err := range sseEvents(body) {
		if err != nil {
			return conv, err
		}
		data := e.Data
		var ev difyEvent
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return conv, fmt.Errorf("%w: %s: a data line is not a JSON event: %s", ErrBackend, b.Name(), b.web.bound(data))
		}
		if ev.ConversationID != "" {
			conv = ev.ConversationID
		}
		switch ev.Event {
		case "message", "agent_message":
			if err := out.send(ev.Answer); err != nil {
				return conv, err
			}
		case "message_replace":
			// Output moderation flagged the answer and replaced it with
			// the app's preset reply. What was emitted cannot be taken
			// back: only an answer not yet begun takes the replacement.
			if out.any {
				return conv, fmt.Errorf("%w: %s: Dify's output moderation replaced the answer after part of it was sent (message_replace)", ErrBadRequest, b.Name())
			}
			if err := out.send(ev.Answer); err != nil {
				return conv, err
			}
		case "agent_thought":
			thoughts.add(ctx, ev)
		case "message_end":
			out.usage = ev.Metadata.Usage
			return conv, nil
		case "error":
			return conv, b.eventError(ev)
		}
	}
	return conv, fmt.Errorf("%w: %s: the stream ended before message_end", ErrBackend, b.Name())
}

// eventError classifies an error event by its status as an HTTP refusal
// would be: 5xx and 429 may pass, other 4xx will not.
func (b *difyBackend) eventError(ev difyEvent) error {
	msg := "error event"
	if ev.Status != 0 {
		msg += fmt.Sprintf(" (status %d)", ev.Status)
	}
	if ev.Code != "" {
		msg += " " + b.web.bound(ev.Code)
	}
	if ev.Message != "" {
		msg += ": " + b.web.bound(ev.Message)
	}
	s := ev.Status
	if s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusConflict && s != http.StatusTooManyRequests {
		return fmt.Errorf("%w: %s: %s", ErrBadRequest, b.Name(), msg)
	}
	return fmt.Errorf("%w: %s: %s", ErrBackend, b.Name(), msg)
}

// difyThoughts turns agent_thought events, each the whole of one thought
// (id) as it stands, into thinking: the part of a thought's text not yet
// handed on, and a tool's start (a tool named, no observation yet) and
// end (an observation), each once. Dify names several tools called at
// once in one "tool", separated by ';'.
type difyThoughts map[string]*difyThought

type difyThought struct {
	text         string // the thought's text handed on
	started, end bool
}

func (d difyThoughts) add(ctx context.Context, ev difyEvent) {
	t := d[ev.ID]
	if t == nil {
		t = &difyThought{}
		d[ev.ID] = t
	}
	switch {
	case strings.HasPrefix(ev.Thought, t.text):
		Think(ctx, ev.Thought[len(t.text):])
	case ev.Thought != "": // rewritten, not grown: the new text on a line of its own
		Think(ctx, "\n"+ev.Thought)
	}
	if ev.Thought != "" {
		t.text = ev.Thought
	}
	if ev.Tool == "" {
		return
	}
	status := ""
	switch {
	case ev.Observation != "" && !t.end:
		status, t.started, t.end = ToolDone, true, true
	case ev.Observation == "" && !t.started:
		status, t.started = ToolStarted, true
	}
	if status == "" {
		return
	}
	for _, name := range strings.Split(ev.Tool, ";") {
		ThinkTool(ctx, ToolStep{Name: name, Status: status})
	}
}
