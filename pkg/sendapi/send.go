// Package sendapi is the shared-connection API: POST
// /v1/bots/{bot}/messages sends a proactive message (aibot_send_msg) as
// the bot, for tools that do not hold its connection. Documented in
// docs/api.md. This file: the request, its validation and the handler's
// routing (here on the leader, lead.go; to the leader from a standby,
// forward.go). What it asks of the node it runs on: seams.go.
package sendapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/botctl/botctl/internal/httpjson"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/metrics"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/prometheus/client_golang/prometheus"
)

// Path is the API's route (Go 1.22 pattern): bot is the bot's id.
const Path = "POST /v1/bots/{bot}/messages"

// URL is the path of a send as bot.
func URL(bot string) string { return "/v1/bots/" + bot + "/messages" }

// Bounds of a send request.
const (
	// MaxBodyBytes bounds a request's body (413 past it): a markdown
	// message's 20,480 bytes of content fit even with every character
	// JSON-escaped (\uXXXX, six bytes for three), and a template card
	// has far more room than any WeCom accepts.
	MaxBodyBytes = 128 << 10
	// MaxChatBytes bounds chat (a WeCom userid has at most 64 bytes,
	// a group chatid about 32).
	MaxChatBytes = 128
	// MaxWait is how long a send waits for its conversation's next
	// slot of the pace budget (push.budget a minute, push.budget_hourly an
	// hour, shared with the answers the pusher sends there). A slot that
	// frees later is answered 429 with Retry-After at once: the request is
	// never held for the minute a full budget can take to free.
	MaxWait = 10 * time.Second
)

// ForwardedHeader marks a send a standby forwarded to the leader (its
// value is the standby's node id). A node never forwards a request that
// carries it: it sends, or answers 503 with the leader's address. A
// client that wants the redirect instead of a forward sends it too.
const ForwardedHeader = "Botctl-Forwarded-By"

// Request is the body of a send: WeCom's aibot_send_msg body with
// botctl's names for the conversation.
type Request struct {
	// Chat is the conversation: the user's userid for a single chat, the
	// group's chatid for a group (aibot_send_msg's chatid).
	Chat string `json:"chat"`
	// ChatType is "single" or "group"; "" lets WeCom find the chat by id.
	ChatType string `json:"chat_type,omitempty"`
	// MsgType is "markdown" or "template_card".
	MsgType  string    `json:"msgtype"`
	Markdown *Markdown `json:"markdown,omitempty"`
	// TemplateCard is WeCom's template card, passed on as it is.
	TemplateCard json.RawMessage `json:"template_card,omitempty"`
}

// Markdown is a markdown message's content.
type Markdown struct {
	Content string `json:"content"`
}

// Result is a send's answer. A message WeCom took: 200 with ErrCode 0
// and ErrMsg "ok". Anything else: Error says what happened and what to do;
// ErrCode and ErrMsg are WeCom's when it refused the message, Field the
// request's field that is wrong (400), Leader the leader's API address
// (503 from a standby that cannot forward).
type Result struct {
	ErrCode *int   `json:"errcode,omitempty"`
	ErrMsg  string `json:"errmsg,omitempty"`
	Error   string `json:"error,omitempty"`
	Field   string `json:"field,omitempty"`
	Bot     string `json:"bot,omitempty"`
	Chat    string `json:"chat,omitempty"`
	// Node is the node that sent the message to WeCom (the leader).
	Node   string `json:"node,omitempty"`
	Leader string `json:"leader,omitempty"`
	// Reason says why a standby did not forward (with Leader).
	Reason string `json:"reason,omitempty"`
}

// sendOutcome is a send's result label (botctl_api_sends_total) with its
// HTTP status; the closed set is documented in docs/api.md.
type sendOutcome string

const (
	outcomeSent         sendOutcome = "sent"          // WeCom acked errcode 0
	outcomeInvalid      sendOutcome = "invalid"       // 400, 413: the request is wrong
	outcomeThrottled    sendOutcome = "throttled"     // 429: the conversation's budget is spent
	outcomeQuotaRefused sendOutcome = "quota_refused" // 429: WeCom said 45009
	outcomeRefused      sendOutcome = "refused"       // WeCom refused the message (403, 422, 502)
	outcomeUnknown      sendOutcome = "unknown"       // 504: written, no trustworthy ack
	outcomeUnavailable  sendOutcome = "unavailable"   // 503: not sent (no connection, WeCom busy)
	outcomeForwarded    sendOutcome = "forwarded"     // a standby relayed the leader's answer
	outcomeNotLeader    sendOutcome = "not_leader"    // 503 from a standby: retry at the leader
)

// Options are what the send API of one node is built from.
type Options struct {
	// Config is the node's running configuration: its node id, bots,
	// push budgets, api.token_file and wecom.ack_timeout.
	Config config.Config
	// Node is the node the API sends through (seams.go).
	Node Node
	// Token is the node API's token, which a forward to the leader carries.
	Token string
	// Client calls the leader's API (api.ca_file trusted); a forward's
	// context bounds it, not its Timeout.
	Client *http.Client
	// WriteTimeout is the node API server's: a forward ends within it.
	WriteTimeout time.Duration
	// Metrics is where botctl_api_sends_total is registered.
	Metrics prometheus.Registerer
}

// API serves Path (mounted behind the node API's token).
type API struct {
	node         Node
	cfg          config.Config
	token        string
	cli          *http.Client
	writeTimeout time.Duration
	sends        *prometheus.CounterVec // botctl_api_sends_total
}

// New is the send API of one node, its counter registered on o.Metrics.
func New(o Options) *API {
	return &API{node: o.Node, cfg: o.Config, token: o.Token, cli: o.Client, writeTimeout: o.WriteTimeout, sends: newSendCounter(o.Metrics)}
}

// newSendCounter registers botctl_api_sends_total on reg: the sends this
// node answered, by bot (a configured one) and outcome.
func newSendCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "api_sends_total",
		Help: "Sends of POST /v1/bots/{bot}/messages this node answered, by bot and outcome: sent, invalid, throttled, quota_refused, refused, unknown, unavailable; on a standby also forwarded (the leader's answer relayed) and not_leader."},
		[]string{"bot", "outcome"})
	reg.MustRegister(c)
	return c
}

// ServeHTTP serves one send: sent here when the node holds the bot's
// connection, else forwarded to the leader or answered with where it is.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bot := r.PathValue("bot")
	if !a.node.Serves(bot) {
		// Not counted: the label would be whatever a caller typed.
		httpjson.WriteIndented(w, http.StatusNotFound, Result{Bot: bot,
			Error: fmt.Sprintf("bot %q is not configured on this node: send as one of %s", bot, strings.Join(a.botIDs(), ", "))})
		return
	}
	answer := func(code int, res Result, o sendOutcome) {
		a.sends.WithLabelValues(bot, string(o)).Inc()
		res.Bot = bot
		httpjson.WriteIndented(w, code, res)
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			answer(http.StatusRequestEntityTooLarge, Result{Error: fmt.Sprintf("body over %d bytes: a message's content is at most %d bytes", MaxBodyBytes, wecom.MaxContentBytes)}, outcomeInvalid)
			return
		}
		answer(http.StatusBadRequest, Result{Error: "body not read: " + err.Error()}, outcomeInvalid)
		return
	}
	req, field, why := parseSend(raw)
	if why != "" {
		answer(http.StatusBadRequest, Result{Field: field, Error: why}, outcomeInvalid)
		return
	}
	if conn := a.node.Conn(bot); conn != nil {
		code, res, o := a.sendHere(r.Context(), conn, bot, req)
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", strconv.Itoa(res.retryAfter))
		}
		answer(code, res.Result, o)
		return
	}
	a.sendElsewhere(w, r, bot, raw)
}

// parseSend decodes and checks a send's body; field and why name what is
// wrong ("" when nothing is).
func parseSend(raw []byte) (req Request, field, why string) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			f = strings.Trim(f, `"`)
			hint := "the fields are chat, chat_type, msgtype, markdown and template_card"
			if f == "chatid" {
				hint = "the conversation is chat (WeCom's chatid: the userid of a single chat, the group's chatid)"
			}
			return req, f, fmt.Sprintf("unknown field %q: %s", f, hint)
		}
		return req, "", "body is not a JSON send request: " + err.Error() + ` (want {"chat":"…","msgtype":"markdown","markdown":{"content":"…"}})`
	}
	if dec.More() {
		return req, "", "body holds more than one JSON value: send one request"
	}
	field, why = req.check()
	return req, field, why
}

// check names the field of r that WeCom would refuse, or that botctl
// cannot send ("" when r may be sent).
func (r Request) check() (field, why string) {
	switch {
	case r.Chat == "":
		return "chat", "chat is required: the user's userid for a single chat, the group's chatid for a group"
	case len(r.Chat) > MaxChatBytes:
		return "chat", fmt.Sprintf("chat is %d bytes: at most %d (a userid or a group chatid)", len(r.Chat), MaxChatBytes)
	case !utf8.ValidString(r.Chat) || strings.IndexFunc(r.Chat, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) >= 0:
		return "chat", fmt.Sprintf("chat %q has spaces or control characters: give the userid or group chatid exactly", r.Chat)
	}
	switch r.ChatType {
	case "", wecom.ChatSingle, wecom.ChatGroup:
	default:
		return "chat_type", fmt.Sprintf("chat_type %q: want single, group, or none (WeCom finds the chat by its id)", r.ChatType)
	}
	switch r.MsgType {
	case wecom.MsgTypeMarkdown:
		if r.TemplateCard != nil {
			return "template_card", "template_card given with msgtype markdown: send one message type per request"
		}
		if r.Markdown == nil || strings.TrimSpace(r.Markdown.Content) == "" {
			return "markdown.content", `markdown.content is empty: msgtype markdown needs {"markdown":{"content":"…"}}`
		}
		if n := len(r.Markdown.Content); n > wecom.MaxContentBytes {
			return "markdown.content", fmt.Sprintf("markdown.content is %d bytes: WeCom takes at most %d bytes of UTF-8; split it into several messages", n, wecom.MaxContentBytes)
		}
		if !utf8.ValidString(r.Markdown.Content) {
			return "markdown.content", "markdown.content is not valid UTF-8"
		}
	case wecom.MsgTypeTemplateCard:
		if r.Markdown != nil {
			return "markdown", "markdown given with msgtype template_card: send one message type per request"
		}
		var card struct {
			CardType any `json:"card_type"`
		}
		if t := bytes.TrimSpace(r.TemplateCard); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &card) != nil {
			return "template_card", `template_card is missing or not a JSON object: msgtype template_card needs {"template_card":{"card_type":"text_notice",…}}`
		}
		if s, ok := card.CardType.(string); !ok || s == "" {
			return "template_card.card_type", "template_card.card_type is required: WeCom's card type (text_notice, news_notice, button_interaction, vote_interaction, multiple_interaction)"
		}
	case "":
		return "msgtype", "msgtype is required: markdown or template_card"
	case wecom.MsgTypeText:
		return "msgtype", "msgtype text: WeCom refuses plain text in a proactive message (errcode 40008): send it as markdown"
	default:
		return "msgtype", fmt.Sprintf("msgtype %q: want markdown or template_card", r.MsgType)
	}
	return "", ""
}

// body is r as aibot_send_msg's body.
func (r Request) body() *wecom.SendMsgBody {
	b := &wecom.SendMsgBody{ChatID: r.Chat, MsgType: r.MsgType, TemplateCard: r.TemplateCard}
	switch r.ChatType {
	case wecom.ChatSingle:
		b.ChatType = wecom.ChatTypeSingle
	case wecom.ChatGroup:
		b.ChatType = wecom.ChatTypeGroup
	}
	if r.Markdown != nil {
		b.Markdown = &wecom.TextContent{Content: r.Markdown.Content}
	}
	return b
}

// botIDs are the bots of the node's configuration file, named in a 404.
func (a *API) botIDs() []string {
	ids := make([]string, len(a.cfg.Bots))
	for i, b := range a.cfg.Bots {
		ids[i] = b.ID
	}
	return ids
}
