// Package ai is the compute side's view of an AI model: a Backend takes a
// task's conversation and streams the answer back as text deltas, which the
// worker accumulates, coalesces and writes to the output bucket.
//
// Five backends sit behind the one interface, each a file of its own and
// a line of kinds.go:
//
//   - demo: a deterministic, made-up answer spread over a configurable time;
//     for the simulator, demos and load tests. No model involved.
//   - exec: a local command (argv, no shell) gets the task on stdin and its
//     stdout is the answer, streamed as it is produced.
//   - openai: any OpenAI-compatible chat-completions endpoint, streamed (SSE).
//   - dify: Dify's chat API, streamed; Dify holds the conversation's memory,
//     whose id is kept in Sessions.
//   - http: a generic streaming webhook (n8n, a home-made agent): one JSON
//     request, the answer as server-sent events or a plain-text body.
//
// What a Backend guarantees: emit is called from the goroutine that called
// Stream, in order, with valid UTF-8 (never half a rune), and never after
// Stream has returned; Stream returns nil only when the answer is complete;
// when ctx ends it returns ctx.Err() promptly (well under a second) having
// stopped whatever it started (HTTP request, child process and its process
// group).
//
// What it does not guarantee: that an answer which failed half-way can be
// resumed. A retry starts the answer again from the beginning, and for exec
// and openai it is a new answer, not necessarily the same text. The worker
// owns retries: no backend retries by itself.
//
// Errors are classified for the worker's retry decision: see ErrBackend,
// ErrBadRequest, ErrTimeout and Retryable.
package ai

import (
	"context"
	"errors"
	"fmt"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/config"
)

// Roles of a Message.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message is one turn of the conversation.
type Message struct {
	Role    string `json:"role"` // RoleSystem, RoleUser or RoleAssistant
	Content string `json:"content"`
}

// Request is one task's input: the conversation's recent turns with the
// user's question last.
type Request struct {
	TaskID string `json:"task_id"`
	// Attempt is the worker's attempt at the task, from 1 (0: unknown).
	// An answer is at least once: a task is tried again after a failure
	// or a lost worker, with the same TaskID.
	Attempt  int       `json:"attempt,omitempty"`
	Messages []Message `json:"messages"`
	// Who asked, where: the task's bot, conversation (chat id and
	// "single" or "group"), user and the question's msgid. Backends that
	// talk to an agent platform pass them on (its user, its conversation).
	Bot      string `json:"bot,omitempty"`
	Chat     string `json:"chat,omitempty"`
	ChatType string `json:"chat_type,omitempty"`
	User     string `json:"user,omitempty"`
	MsgID    string `json:"msgid,omitempty"`
	// Attachments are the files the user sent with the question, in the
	// order sent (none for a text message).
	Attachments []Attachment `json:"attachments,omitempty"`
	// Event is what the user did instead of writing, when the task
	// answers an event (a click on a card, card.go); nil for a message.
	// The question is then the user's choice in words.
	Event *Event `json:"event,omitempty"`
}

// Attachment is one file a user sent: what it is and where its bytes
// are. The bytes themselves never travel in a Request.
type Attachment struct {
	Kind string `json:"kind"` // "image", "file", "video" or "voice"
	Name string `json:"name,omitempty"`
	MIME string `json:"mime,omitempty"`
	Size int64  `json:"size"`
	// Quoted: part of the message the user quoted, not of the question.
	Quoted bool `json:"quoted,omitempty"`
	// Width and Height are an image's pixel size (0 when not an image or
	// not decodable).
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
	// Path is a local file holding the bytes, readable by this process
	// (and by an exec backend's command).
	Path string `json:"path,omitempty"`
}

// Question is the content of the last user message ("" if there is
// none; a message of files alone, an image say, has none either).
func (r Request) Question() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == RoleUser {
			return r.Messages[i].Content
		}
	}
	return ""
}

// validate refuses a request no backend can answer.
func (r Request) validate() error {
	for i, m := range r.Messages {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant:
		default:
			return fmt.Errorf("%w: task %s: message %d has role %q (want system, user or assistant)", ErrBadRequest, r.TaskID, i, m.Role)
		}
	}
	if r.Question() == "" && len(r.Attachments) == 0 {
		return fmt.Errorf("%w: task %s: no user message with a question", ErrBadRequest, r.TaskID)
	}
	return nil
}

// Backend streams an answer.
type Backend interface {
	// Name is the backend's kind and what it talks to, for logs and status
	// ("demo", "exec:answer.sh", "openai:gpt-4o-mini"). It holds no secret.
	Name() string
	// Stream calls emit with each new piece of the answer, in order, and
	// returns when the answer is complete (nil), ctx ends (ctx.Err()), or
	// it fails (an error wrapping ErrBackend, ErrBadRequest or ErrTimeout).
	// If emit returns an error, the stream stops and Stream returns that
	// error unchanged.
	Stream(ctx context.Context, req Request, emit func(delta string) error) error
}

// Errors a worker acts on. Every failure a backend returns wraps exactly one
// of them; check with errors.Is.
var (
	// ErrBackend: the backend failed (HTTP 5xx or 429, connection cut,
	// command exited non-zero, malformed stream). A retry, after a backoff,
	// may well succeed. Text already emitted is part of a failed answer.
	ErrBackend = errors.New("ai: backend failed")
	// ErrBadRequest: the backend refused this request or this configuration
	// (HTTP 400, 401, 403, 404, a content filter, no question in the task).
	// Retrying the same request will not help: give up and tell the user.
	ErrBadRequest = errors.New("ai: request refused")
	// ErrTimeout: the answer was not complete within the backend's
	// configured timeout. Retrying may help once (a slow moment of the
	// model) but an answer that is simply too long will time out again.
	ErrTimeout = errors.New("ai: answer timed out")
)

// Retryable reports whether a worker should try the task again after err:
// true for ErrBackend and ErrTimeout; false for ErrBadRequest, for a context
// that ended (the worker is stopping or the task was canceled) and for any
// other error (such as one returned by emit).
func Retryable(err error) bool {
	if err == nil || errors.Is(err, ErrBadRequest) {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return errors.Is(err, ErrBackend) || errors.Is(err, ErrTimeout)
}

// errAnswerTimeout is the cause a backend puts on its own timeout context,
// to tell its timeout (ErrTimeout) from the caller's context ending.
var errAnswerTimeout = errors.New("ai: backend timeout")

// Kinds of backend: config.AIKinds, each built by its line in kinds.go.
const (
	KindDemo   = config.AIKindDemo
	KindExec   = config.AIKindExec
	KindOpenAI = config.AIKindOpenAI
	KindDify   = config.AIKindDify
	KindHTTP   = config.AIKindHTTP
)

// Config chooses and configures the backend: the "ai" section of the
// node's configuration, described (and checked) in pkg/config. Only the
// section named by Kind is read.
type Config = config.AI

// The sections of each backend.
type (
	DemoConfig   = config.AIDemo
	ExecConfig   = config.AIExec
	OpenAIConfig = config.AIOpenAI
	DifyConfig   = config.AIDify
	HTTPConfig   = config.AIHTTP
	// BackendConfig is one entry of ai.fallback; BreakerConfig is
	// ai.breaker.
	BackendConfig = config.AIBackend
	BreakerConfig = config.AIBreaker
)

// Sessions keeps, for an agent platform that holds a conversation's memory
// itself (Dify), the platform's id of the conversation it holds for one
// user of one chat of a bot, per backend (Name). It must be where every
// node reads it, so that a question answered after a failover continues
// the same conversation: pkg/task's Sessions keeps it in the chat's
// conversation record, which /new and the idle expiry forget.
type Sessions interface {
	// Session is the id stored, "" when none.
	Session(ctx context.Context, bot, chat, user, backend string) (string, error)
	// SetSession stores id ("" forgets it).
	SetSession(ctx context.Context, bot, chat, user, backend, id string) error
}

// Option is what New takes besides the configuration: the parts of the
// node a backend uses.
type Option func(*options)

type options struct {
	sessions Sessions
	breakers *Breakers
	clock    clock.Clock
	tools    Tools
}

// WithClock is what the first-token timeout and the demo backend's pace
// wait on. Without it, clock.Real.
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithBreakers is the node's circuit breakers, shared by every bot's
// chain (they are kept per bot and backend). Without it, the chain has
// breakers of its own.
func WithBreakers(b *Breakers) Option { return func(o *options) { o.breakers = b } }

// WithSessions is where the dify backend keeps its conversation ids.
// Without it (botctl config check), every question starts a new Dify
// conversation.
func WithSessions(s Sessions) Option { return func(o *options) { o.sessions = s } }

// New validates cfg, fills in defaults and returns the bot's backends as
// one: a Chain of ai.kind's backend and each of ai.fallback, under
// ai.first_token_timeout and ai.breaker. Errors name the configuration
// key at fault (ai.kind, ai.exec.command, ai.fallback[0].openai.model, …).
func New(cfg Config, opts ...Option) (Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	var links []Backend
	for i, bc := range cfg.Backends() {
		b, err := newOne(cfg.With(bc), o)
		if err != nil {
			if i > 0 {
				err = config.FallbackKey(err, i-1)
			}
			return nil, err
		}
		links = append(links, b)
	}
	c := newChain(links, cfg, o.breakers)
	c.clock = o.clock
	return c, nil
}
