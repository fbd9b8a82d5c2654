package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/redact"
)

// The AI backends: ai.kind's values. Each has a section of its own, the
// key named as the kind, in AIBackend and AI; sections lists them, and
// AIKinds (every message naming the kinds) is read from there. pkg/ai
// builds each kind from one line of its kinds.go, which its tests hold to
// AIKinds.
const (
	AIKindDemo   = "demo"
	AIKindExec   = "exec"
	AIKindOpenAI = "openai"
	AIKindDify   = "dify"
	AIKindHTTP   = "http"
)

// The exec backend's input modes (ai.exec.input).
const (
	ExecInputQuestion     = "question"
	ExecInputConversation = "conversation"
	ExecInputJSON         = "json"
)

// Defaults and bounds of the AI section, applied by pkg/ai when it builds
// the backend.
const (
	DemoDefaultAnswerTime  = 10 * time.Second
	DemoDefaultParagraphs  = 3
	DemoMaxParagraphs      = 1000
	DemoMaxAnswerBytes     = 16 << 20
	ExecDefaultTimeout     = 10 * time.Minute
	OpenAIDefaultBaseURL   = "https://api.openai.com/v1"
	OpenAIDefaultAPIKeyEnv = "OPENAI_API_KEY"
	OpenAIDefaultTimeout   = 10 * time.Minute
	OpenAIMaxTemperature   = 2
	DifyDefaultBaseURL     = "https://api.dify.ai/v1"
	DifyDefaultTimeout     = 10 * time.Minute
	HTTPDefaultTimeout     = 10 * time.Minute
)

// Bounds of ai.max_answer_bytes. The limit leaves 64 KiB of NATS's
// default max_payload (1 MiB) for the output's other fields and the note.
const (
	DefaultMaxAnswerBytes = 512 << 10
	MaxAnswerBytesLimit   = 960 << 10
)

// AI chooses and configures the AI backend (pkg/ai): the "ai" section of the node's
// configuration. Only the section named by Kind is read.
type AI struct {
	// Kind is one of AIKinds. Required.
	Kind string `yaml:"kind"`
	// MaxConcurrency is how many answers this node asks of the backend at
	// once: what the model provider allows (its concurrent-request or
	// rate limit), divided among the nodes. Tasks beyond it wait queued
	// (not started; the user sees push.queued_line) and the node fetches
	// no more tasks than it can start, so the others take them. The
	// worker enforces it (worker.Config.AIConcurrency). Default 0: no
	// limit beyond worker.slots.
	MaxConcurrency int `yaml:"max_concurrency"`
	// MaxAnswerBytes caps an answer: once it would take more bytes than
	// this in the output bucket (its UTF-8 length, more for what JSON
	// escapes: quotes, backslashes, newlines, control characters), the
	// backend is stopped, the answer cut there and a note appended (the
	// user reads that it was cut), and that is the answer, stored and
	// delivered once. An answer longer than the bucket's largest value
	// (NATS's max_payload, 1 MiB by default) could not be stored at all.
	// The worker enforces it (worker.Config.MaxAnswerBytes). Default
	// DefaultMaxAnswerBytes (512 KiB: about 26 WeCom messages, pushed in
	// parts; 0 means it too); at most MaxAnswerBytesLimit.
	MaxAnswerBytes int `yaml:"max_answer_bytes"`
	// ShowThinking is what the user reads of the backend's thinking (its
	// model's reasoning, its agent's tool steps: pkg/ai's Think and
	// ThinkTool), shown folded in a <think> block before the answer:
	// ShowThinkingOn (both), ShowThinkingTools (the tool steps alone) or
	// ShowThinkingOff (none). Default off: reasoning is long, and a
	// model's may say what its operator would rather not show. Whatever
	// it says, the thinking is stored with the task's output (botctl
	// tasks show --json). YAML's true and false are these words.
	ShowThinking string `yaml:"show_thinking"`
	// Tools are the WeCom MCP tools the bot's agents may call through the
	// node API's gateway (/v1/bots/{bot}/mcp/{biz_type}) and the openai
	// backend offers its model: each entry a business type ("todo": every
	// tool of it) or one tool of one ("msg/get_message"). Empty (the
	// default): none. Checked by ValidateTools.
	Tools  []string `yaml:"tools"`
	Demo   AIDemo   `yaml:"demo"`
	Exec   AIExec   `yaml:"exec"`
	OpenAI AIOpenAI `yaml:"openai"`
	Dify   AIDify   `yaml:"dify"`
	HTTP   AIHTTP   `yaml:"http"`
	// FirstTokenTimeout, Breaker and Fallback: what happens when the
	// backend fails (aichain.go).
	FirstTokenTimeout time.Duration `yaml:"first_token_timeout"`
	Breaker           AIBreaker     `yaml:"breaker"`
	Fallback          []AIBackend   `yaml:"fallback"`
}

// The values of ai.show_thinking ("" is ShowThinkingOff).
const (
	ShowThinkingOn    = "true"
	ShowThinkingTools = "tools"
	ShowThinkingOff   = "false"
)

// AIDemo configures the demo backend: a deterministic answer, the same
// for the same question and settings, streamed evenly over AnswerTime. It
// calls no model; it exists so the whole pipeline (queue, worker, output
// bucket, pusher, WeCom stream window) can be exercised and load-tested.
type AIDemo struct {
	// AnswerTime is how long one answer takes to stream. Default 10s.
	// Raise it to test heartbeats and the WeCom stream window (answers of
	// several minutes); lower it for fast tests.
	AnswerTime time.Duration `yaml:"answer_time"`
	// AnswerTimeMax, when above AnswerTime, spreads answers over
	// [AnswerTime, AnswerTimeMax]: each question's time is fixed by its
	// text (a hash), so a rerun takes as long. 0: every answer takes
	// AnswerTime.
	AnswerTimeMax time.Duration `yaml:"answer_time_max"`
	// Paragraphs is the number of numbered paragraphs. Default 3, at most
	// 1000.
	Paragraphs int `yaml:"paragraphs"`
	// AnswerBytes, if set, makes the answer at least this many bytes long
	// (paragraphs grow by whole sentences), e.g. 30000 to test answers
	// larger than one WeCom message. Default 0: a few sentences per
	// paragraph (a few hundred bytes). At most 16 MiB.
	AnswerBytes int `yaml:"answer_bytes"`
}

// AIExec configures the exec backend: one process per answer, started
// from Command (argv, no shell) in its own process group. The task goes to
// its stdin (see Input) and stdin is then closed; everything it writes to
// stdout is the answer, streamed as it is produced; exit status 0 means the
// answer is complete.
//
// The process gets a clean environment, not the node's: the node's holds
// every bot secret (BOTCTL_BOT_<ID>_SECRET) and API key, and a model's
// helper script has no business with them. It gets PATH, HOME, LANG,
// LC_ALL, LC_CTYPE, TZ and TMPDIR from the node (those set), BOTCTL_TASK_ID,
// and what Env names, nothing else; never one of the node's BOTCTL_*
// variables. It still runs as the node (uid, files, loopback network):
// `botctl exec-sandbox` runs it in a systemd unit of its own
// (docs/security.md).
type AIExec struct {
	// Command is the program and its arguments, e.g. ["/usr/local/bin/answer",
	// "--model", "small"]. Required. A program without a slash is looked up
	// in PATH when the backend is created.
	Command []string `yaml:"command"`
	// Input is what the process reads on stdin:
	//   "question" (default): the question alone (the last user message);
	//   "conversation": every message as "<role>: <content>", separated by
	//     a blank line, the question last;
	//   "json": the Request as one JSON object:
	//     {"task_id": "…", "messages": [{"role": "user", "content": "…"}, …]}.
	Input string `yaml:"input"`
	// Timeout bounds one answer, start to exit. Default 10m. Past it the
	// process group is killed and Stream returns ErrTimeout.
	Timeout time.Duration `yaml:"timeout"`
	// Dir is the working directory. Default: the node's.
	Dir string `yaml:"dir"`
	// Env is the rest of the process's environment (config key ai.exec.env):
	// "NAME=value" sets NAME; "NAME" alone passes the node's NAME through
	// (if set), e.g. the one API key the command needs; a BOTCTL_* name is
	// refused (ExecEnvWithheld). Nothing else of the node's environment
	// reaches the process.
	Env []string `yaml:"env"`
}

// AIOpenAI configures the openai backend: POST <BaseURL>/chat/completions
// with "stream": true, read as server-sent events. Any OpenAI-compatible
// server works (OpenAI, Azure's compatible endpoint, vLLM, Ollama,
// DeepSeek, …). The SDK never retries (the worker does) and reads nothing
// from the environment except the key variable named here.
type AIOpenAI struct {
	// BaseURL is the API root, the part before "/chat/completions".
	// Default "https://api.openai.com/v1".
	BaseURL string `yaml:"base_url"`
	// Model is the model name sent with each request. Required.
	Model string `yaml:"model"`
	// APIKeyEnv names the environment variable holding the API key
	// (sent as "Authorization: Bearer …"). Default "OPENAI_API_KEY". It is
	// read once, when the backend is created, and must not be empty (a
	// server that needs no key accepts any value). The key never appears in
	// logs, errors or Name.
	APIKeyEnv string `yaml:"api_key_env"`
	// SystemPrompt, if set, is sent as the first message, before the
	// conversation (which may have system messages of its own).
	SystemPrompt string `yaml:"system_prompt"`
	// Timeout bounds one answer, request to last chunk. Default 10m.
	// Answers take minutes: too low cuts long answers (ErrTimeout), too high
	// holds a worker slot on a stalled stream.
	Timeout time.Duration `yaml:"timeout"`
	// MaxTokens, if above 0, is sent as "max_tokens": the most tokens the
	// model may generate for one answer (an answer cut there ends with
	// finish_reason "length" and is delivered as it is). 0: not sent, the
	// model's own limit.
	MaxTokens int `yaml:"max_tokens"`
	// Temperature, if above 0, is sent as "temperature" (0 to 2: lower is
	// more deterministic). 0: not sent, the model's default.
	Temperature float64 `yaml:"temperature"`
	// NoUsage stops asking for the answer's usage ("stream_options":
	// {"include_usage": true}), for a server that refuses the option (an
	// HTTP 400): its answers then report no tokens (no token metrics, no
	// token limits). Default false: asked.
	NoUsage bool `yaml:"no_usage"`
}

// AIDify configures the dify backend: Dify's chat API (a Chatbot, Agent or
// Chatflow app), POST <BaseURL>/chat-messages with "response_mode":
// "streaming". Dify holds the conversation's memory: each WeCom
// conversation (and, in a group chat, each of its users: Dify ties a
// conversation to its user) continues the Dify conversation it started,
// whose id every node reads from the conversation's record (pkg/ai, pkg/task).
type AIDify struct {
	// BaseURL is the API root, the part before "/chat-messages".
	// Default "https://api.dify.ai/v1"; a self-hosted Dify's is
	// "https://<host>/v1".
	BaseURL string `yaml:"base_url"`
	// APIKeyFile is a file holding the app's API key ("app-…"), sent as
	// "Authorization: Bearer …". Required; read once, when the backend is
	// created; a file every user may read is refused. The key never
	// appears in logs, errors or Name.
	APIKeyFile string `yaml:"api_key_file"`
	// Timeout bounds one answer, request to message_end. Default 10m.
	Timeout time.Duration `yaml:"timeout"`
}

// APIKey reads the key in APIKeyFile.
func (d AIDify) APIKey() (string, error) {
	if d.APIKeyFile == "" {
		return "", errors.New("config key ai.dify.api_key_file: required (a file holding the Dify app's API key, app-…, mode 600)")
	}
	return readSecretFile("ai.dify.api_key_file", d.APIKeyFile)
}

// AIHTTP configures the http backend: a generic streaming webhook (n8n, a
// home-made agent). Each question is one POST of a JSON request to URL;
// the answer streams back as server-sent events or as a plain-text body
// (docs/ai.md has the wire format, with an example).
type AIHTTP struct {
	// URL is the endpoint. Required. Only its host appears in logs, errors
	// and Name (a webhook's path may be its secret, as n8n's is).
	URL string `yaml:"url"`
	// TokenFile, if set, is a file holding a token sent as
	// "Authorization: Bearer …"; read once, when the backend is created; a
	// file every user may read is refused. Unset: no Authorization header.
	TokenFile string `yaml:"token_file"`
	// Timeout bounds one answer, request to the end of the answer.
	// Default 10m.
	Timeout time.Duration `yaml:"timeout"`
}

// Token reads the token in TokenFile ("" when it is unset).
func (h AIHTTP) Token() (string, error) {
	if h.TokenFile == "" {
		return "", nil
	}
	return readSecretFile("ai.http.token_file", h.TokenFile)
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks the section's values, the section named by Kind only.
// What depends on the machine (the exec command in PATH, ai.exec.dir,
// the API key's variable) is checked when pkg/ai builds the backend.
// Errors name the key (ai.kind, ai.openai.model, …).
func (a AI) Validate() error {
	if a.MaxConcurrency < 0 {
		return fmt.Errorf("config key ai.max_concurrency: %d: want 0 (no limit beyond worker.slots) or the number of answers the model provider allows at once from this node", a.MaxConcurrency)
	}
	if a.MaxAnswerBytes < 0 || a.MaxAnswerBytes > MaxAnswerBytesLimit {
		return fmt.Errorf("config key ai.max_answer_bytes: %d is out of range: want at most %d (0 for the default, %d); a NATS server with a smaller max_payload needs it lower still", a.MaxAnswerBytes, MaxAnswerBytesLimit, DefaultMaxAnswerBytes)
	}
	switch a.ShowThinking {
	case "", ShowThinkingOn, ShowThinkingTools, ShowThinkingOff:
	default:
		return fmt.Errorf("config key ai.show_thinking: %q: want true (the model's reasoning and its tool steps, folded before the answer), tools (the tool steps alone) or false (none, the default)", a.ShowThinking)
	}
	return errors.Join(ValidateTools(a.Tools), a.Primary().validate(), a.validateChain())
}

// aiSection is one backend's section of the ai keys.
type aiSection interface{ validate() error }

// aiKindSection is a kind and its section of one AIBackend.
type aiKindSection struct {
	kind    string
	section aiSection
}

// sections are b's sections by kind, in the order the kinds are named to
// users: the one list of the kinds in this package (AIKinds).
func (b AIBackend) sections() []aiKindSection {
	return []aiKindSection{
		{AIKindDemo, b.Demo},
		{AIKindExec, b.Exec},
		{AIKindOpenAI, b.OpenAI},
		{AIKindDify, b.Dify},
		{AIKindHTTP, b.HTTP},
	}
}

// AIKinds are ai.kind's values, in the order they are named to users.
func AIKinds() []string {
	var kinds []string
	for _, s := range (AIBackend{}).sections() {
		kinds = append(kinds, s.kind)
	}
	return kinds
}

// aiKindList is the kinds, each formatted by verb (%s, %q), separated by
// sep, the last by last: `"demo", "exec" or "http"`.
func aiKindList(verb, sep, last string) string {
	kinds := AIKinds()
	q := make([]string, len(kinds))
	for i, k := range kinds {
		q[i] = fmt.Sprintf(verb, k)
	}
	return strings.Join(q[:len(q)-1], sep) + last + q[len(q)-1]
}

// validate checks the backend's kind and the section it names.
func (a AIBackend) validate() error {
	if a.Kind == "" {
		return fmt.Errorf("config key ai.kind: required (one of %s)", aiKindList("%q", ", ", ", "))
	}
	for _, s := range a.sections() {
		if s.kind == a.Kind {
			return s.section.validate()
		}
	}
	return fmt.Errorf("config key ai.kind: %q is not a backend (want %s)", a.Kind, aiKindList("%q", ", ", " or "))
}

func (d AIDemo) validate() error {
	if d.AnswerTime < 0 {
		return fmt.Errorf("config key ai.demo.answer_time: %s is negative", d.AnswerTime)
	}
	answerTime := d.AnswerTime
	if answerTime == 0 {
		answerTime = DemoDefaultAnswerTime
	}
	if d.AnswerTimeMax != 0 && d.AnswerTimeMax < answerTime {
		return fmt.Errorf("config key ai.demo.answer_time_max: %s is below ai.demo.answer_time (%s): set it higher, or 0 for a fixed answer time", d.AnswerTimeMax, answerTime)
	}
	if d.Paragraphs < 0 || d.Paragraphs > DemoMaxParagraphs {
		return fmt.Errorf("config key ai.demo.paragraphs: %d is out of range (0 for the default %d, at most %d)", d.Paragraphs, DemoDefaultParagraphs, DemoMaxParagraphs)
	}
	if d.AnswerBytes < 0 || d.AnswerBytes > DemoMaxAnswerBytes {
		return fmt.Errorf("config key ai.demo.answer_bytes: %d is out of range (0 for natural length, at most %d)", d.AnswerBytes, DemoMaxAnswerBytes)
	}
	return nil
}

func (e AIExec) validate() error {
	if len(e.Command) == 0 || e.Command[0] == "" {
		return errors.New(`config key ai.exec.command: required (argv of the program, e.g. ["/usr/local/bin/answer"])`)
	}
	switch e.Input {
	case "", ExecInputQuestion, ExecInputConversation, ExecInputJSON:
	default:
		return fmt.Errorf(`config key ai.exec.input: %q (want "question", "conversation" or "json")`, e.Input)
	}
	if e.Timeout < 0 {
		return fmt.Errorf("config key ai.exec.timeout: %s is negative", e.Timeout)
	}
	for i, kv := range e.Env {
		k, _, set := strings.Cut(kv, "=")
		if !envNameRE.MatchString(k) {
			// Not the entry itself: it may hold a secret.
			return fmt.Errorf("config key ai.exec.env[%d]: want NAME (passed from the node's environment) or NAME=value, NAME letters, digits and '_'", i)
		}
		if !set && ExecEnvWithheld(k) {
			return fmt.Errorf("config key ai.exec.env[%d]: %s is the node's own configuration (bot secrets, the API token, password files): "+
				"it is never passed to the exec backend; give the command what it needs under another name (NAME=value, or a variable of its own)", i, k)
		}
	}
	return nil
}

// ExecEnvWithheld reports whether the node's variable name is never passed
// to the exec backend, even when ai.exec.env names it: BOTCTL_* configure
// the node and hold its secrets (BOTCTL_BOT_<ID>_SECRET, the *_FILE keys).
func ExecEnvWithheld(name string) bool { return strings.HasPrefix(strings.ToUpper(name), "BOTCTL_") }

func (o AIOpenAI) validate() error {
	if o.BaseURL != "" {
		if err := backendURL("ai.openai.base_url", o.BaseURL, OpenAIDefaultBaseURL, "http://127.0.0.1:11434/v1", "the API key (ai.openai.api_key_env)"); err != nil {
			return err
		}
	}
	if o.Model == "" {
		return errors.New("config key ai.openai.model: required (the model name, e.g. gpt-4o-mini)")
	}
	if o.Timeout < 0 {
		return fmt.Errorf("config key ai.openai.timeout: %s is negative", o.Timeout)
	}
	if o.MaxTokens < 0 {
		return fmt.Errorf("config key ai.openai.max_tokens: %d is negative (0: not sent, the model's own limit)", o.MaxTokens)
	}
	if o.Temperature < 0 || o.Temperature > OpenAIMaxTemperature {
		return fmt.Errorf("config key ai.openai.temperature: %g is out of range: want 0 to %d (0: not sent, the model's default)", o.Temperature, OpenAIMaxTemperature)
	}
	return nil
}

func (d AIDify) validate() error {
	if d.BaseURL != "" {
		if err := backendURL("ai.dify.base_url", d.BaseURL, DifyDefaultBaseURL, "http://127.0.0.1/v1", "the API key (ai.dify.api_key_file)"); err != nil {
			return err
		}
	}
	if d.APIKeyFile == "" {
		return errors.New("config key ai.dify.api_key_file: required (a file holding the Dify app's API key, app-…, mode 600)")
	}
	if d.Timeout < 0 {
		return fmt.Errorf("config key ai.dify.timeout: %s is negative", d.Timeout)
	}
	return nil
}

func (h AIHTTP) validate() error {
	if h.URL == "" {
		return errors.New("config key ai.http.url: required (the agent's endpoint, e.g. https://n8n.example.com/webhook/…)")
	}
	if err := backendURL("ai.http.url", h.URL, "https://agent.example.com/answer", "http://127.0.0.1:5678/webhook/…", "the token (ai.http.token_file)"); err != nil {
		return err
	}
	if h.Timeout < 0 {
		return fmt.Errorf("config key ai.http.timeout: %s is negative", h.Timeout)
	}
	return nil
}

// backendURL checks an AI backend's URL: http(s), with a host, and plain
// http only to this machine, since the secret and every question would
// cross the network in clear text.
func backendURL(key, raw, example, local, secret string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		if key == "ai.http.url" { // a webhook's path may be its secret: not quoted
			return fmt.Errorf("config key %s: not an http(s) URL such as %s", key, example)
		}
		return fmt.Errorf("config key %s: %q is not an http(s) URL such as %s", key, redact.URL(raw), example)
	}
	if u.Scheme == "http" && !LoopbackHost(u.Hostname()) {
		return fmt.Errorf("config key %s: %s is plain http to another machine: %s and every question would cross the network in clear text; "+
			"use https:// (plain http only to a server on this machine, e.g. %s)", key, redact.URL(u.Scheme+"://"+u.Host), secret, local)
	}
	return nil
}
