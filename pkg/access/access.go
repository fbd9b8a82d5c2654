// Package access is the leader's inbound path. It stays light: it
// receives, checks, records and hands off; the work happens on any node.
//
// For each message callback, in order: parse and validate → dedupe by msgid
// → allowlist (polite refusal) → content checks (empty, too long,
// unsupported type: a clear reply) → commands (/help, /stop, /new, /status)
// → the bot's limits (limits.go: over one, the limit text and no task)
// → the conversation mutex, which is the dispatch itself (a busy
// conversation is told to wait) → the receipt (the first stream frame) →
// the task record with the raw message context. Workers tolerate a record
// that lands after they pull the task: the queue message carries the same
// context.
//
// The early receipt: a fresh message (created after its connection was
// subscribed: no other connection had it, so the task bucket's dedupe read
// is skipped) in a conversation the pusher knows to be idle, with no other
// message of it in hand, gets its receipt before the publish rather than
// after it, so the receipt waits for no JetStream round trip. It is
// written where the callback is taken, in the connection's callback
// order, before a handler goroutine starts: on a loaded machine each
// goroutine start on the way cost tens of milliseconds at p99. What it
// needs is in memory (the dedupe memory, the checks, the pusher's index).
// The publish is still the mutex: when it refuses after all, the
// receipted stream is finished with the busy reply (one send more than
// the refusal alone).
//
// Messages are handled concurrently (bounded), so one slow conversation
// never delays the others; nothing here blocks the connection's reader.
package access

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/buildinfo"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/limits"
	"github.com/botctl/botctl/pkg/media"
	"github.com/botctl/botctl/pkg/retry"
	"github.com/botctl/botctl/pkg/tally"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
)

// Texts are what users read. Defaults are Chinese, as WeCom's users.
type Texts struct {
	Receipt     string // first stream frame; default "已收到，正在处理…"
	Busy        string // a task is already running in this conversation
	Refused     string // not on the allowlist
	Empty       string
	TooLong     string // %d: the limit in bytes
	Unsupported string // %s: the message type
	Help        string
	Welcome     string // answer to enter_chat ("" sends none)
	WelcomeCard string // a template card's JSON answering enter_chat, over Welcome ("" none)
	Version     string // the version reported for enter_check_update; default botctl's
	Unavailable string // a command that needs JetStream while it is away
	Limit       string // a message over one of the bot's limits (limits.go)
}

// DefaultReceipt is the receipt frame's text when Texts.Receipt is empty.
const DefaultReceipt = "已收到，正在处理…"

// DefaultBusy is the busy reply when Texts.Busy is empty.
const DefaultBusy = "上一个问题还在处理中，请稍候再问。发送 /stop 可以停止它。"

func (t *Texts) setDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&t.Receipt, DefaultReceipt)
	def(&t.Version, buildinfo.Get().Version)
	def(&t.Busy, DefaultBusy)
	def(&t.Refused, "抱歉，你没有使用这个机器人的权限。如需开通，请联系管理员。")
	def(&t.Empty, "请输入你的问题。")
	def(&t.TooLong, "问题太长了，请精简到 %d 字节以内再发送。")
	def(&t.Unsupported, "暂不支持 %s 类型的消息，请发送文字。")
	def(&t.Unavailable, "系统正在恢复中，暂时无法执行命令，请稍后再试。你的问题仍会被回答。")
	def(&t.Limit, DefaultLimit)
	def(&t.Help, "可用命令：\n/help 查看帮助\n/stop 停止正在进行的回答\n/new 开始新的对话（清除上下文）\n/status 查看当前任务")
}

// Config configures the inbound path of one node (for every bot it leads).
type Config struct {
	NodeID string
	// Store is JetStream's streams and buckets. Nil: not reachable yet
	// (the node started during an outage); Bind supplies it later. Until
	// then messages are still received, receipted and handed to Dispatch
	// (which spools them), deduplicated in memory only, and commands that
	// need JetStream say so.
	Store *jetstream.Store
	// Dispatch hands a task to compute (required).
	Dispatch Dispatcher
	// AllowUsers, AllowChats, MaxQuestionBytes and Texts are every bot's
	// Rules (see there), unless Bots gives the bot's own.
	AllowUsers, AllowChats []string
	MaxQuestionBytes       int
	// Parallel bounds messages handled at once. Default 2048: a
	// handling mostly waits on JetStream (the publish, the record), under
	// load for a quarter to half a second, so at 500 messages a second
	// fewer slots hold callbacks back on the connection, receipts
	// included (the "slot" stage).
	Parallel int
	// DedupeSize is how many recent msgids are remembered in memory (the
	// task bucket is the authority beyond it). Default 65536.
	DedupeSize int
	// Timeout bounds each step of the handling of one message (the
	// dispatch, the receipt, the record), so one message takes at most a
	// few of them. Default 10s.
	Timeout time.Duration
	Texts   Texts
	// Bots, if set, gives each bot's own Rules.
	Bots Bots
	// Outbound, if set, is the bots' send budgets and pushers.
	Outbound Outbound
	// Metrics, if set, learns how long each receipt and its steps took.
	Metrics Metrics
	// Lifecycle records tasks (a *task.Lifecycle). Default: one on Store.
	Lifecycle Records
	// Watermark, if set, learns of each message handled to the end.
	Watermark Watermark
	// Marks, if set, are the conversations' "may be incomplete" marks.
	Marks Marks
	// Cards, if set, answers clicks on the cards of tasks' replies
	// (cards.go); without, a click is not answered.
	Cards Cards
	// Media downloads and stores the files of a message (media.go).
	// Default: a *media.Fetcher with its defaults (20 MB, 30 s).
	Media Media
	// MediaDrain bounds a download that goes on after its term ended:
	// it is cut this long after, so that the node's drain
	// (node.Config.DrainTimeout, 15 s by default) sees its handling end.
	// Default 10s.
	MediaDrain time.Duration
	// Clock waits (a test seam). Default clock.Real.
	Clock  clock.Clock
	Logger zerolog.Logger
	// Now is the clock (a test seam). Default time.Now.
	Now func() time.Time
}

// Access handles one node's inbound callbacks; it implements node.Inbound.
type Access struct {
	cfg     Config
	log     zerolog.Logger
	def     *Rules // Config's, for a bot Bots gives none
	sem     chan struct{}
	wg      sync.WaitGroup
	seen    *lru        // msgids being handled or handled (dedupe)
	arrived *lru        // msgids (and WeCom history ids) read by this node, handled or waiting for a handler
	inHand  tally.Tally // messages read and not yet handled, per bot and conversation
	gates   gates       // messages with files read and not yet dispatched, per bot and conversation (order.go)
	statsMu sync.Mutex
	stats   Stats

	termsMu sync.Mutex
	terms   map[*election.Term]*termCalls // callbacks in hand, per term

	js atomic.Pointer[bound] // nil until JetStream is reachable

	marks marks // seen marks JetStream refused, written again (marks.go)
}

type bound struct {
	store  Buckets
	lc     Records
	limits *limits.Counters // the limits' counts, in store's bucket
}

// Bind supplies JetStream to an Access made without it (Config.Store nil).
func (a *Access) Bind(store *jetstream.Store, lc Records) {
	if lc == nil {
		lc = task.NewLifecycle(store, a.cfg.NodeID, a.cfg.Logger).WithClock(a.cfg.Now)
	}
	a.js.Store(&bound{store: store, lc: lc, limits: limits.New(store.Limits(), a.cfg.Now)})
}

// Stats counts what the inbound path did.
type Stats struct {
	Received   int64 `json:"received"`
	Duplicates int64 `json:"duplicates"` // callbacks delivered again: messages seen, feedback_events counted (feedback.go)
	Refused    int64 `json:"refused"`
	Invalid    int64 `json:"invalid"`
	Commands   int64 `json:"commands"`
	Busy       int64 `json:"busy"`
	Dispatched int64 `json:"dispatched"`
	Failed     int64 `json:"failed"`
	Suppressed int64 `json:"suppressed"` // replies skipped to keep the budget for an answer
	Backfilled int64 `json:"backfilled"` // missed messages found by the gap backfill and taken as tasks
	// EarlyReceipts are receipts sent before the queue publish, not after
	// it (a fresh message in a conversation predicted idle: Config.Idle).
	EarlyReceipts int64 `json:"early_receipts"`
	// MediaFailed are messages whose files could not be taken (too big,
	// expired, corrupt, too slow, JetStream away): the user was told why.
	MediaFailed int64 `json:"media_failed"`
	// EarlyMissed are early receipts whose conversation the publish found
	// busy (or whose dispatch failed): the receipted stream was finished
	// with the refusal, one send more than a refusal alone.
	EarlyMissed int64 `json:"early_missed"`
	// Limited are messages over one of their bot's limits: refused with
	// the limit text, no task run (limits.go).
	Limited int64 `json:"limited"`
}

// dispatchFailed is the reply to a message no tier could take.
const dispatchFailed = "抱歉，系统暂时无法处理你的问题，请稍后再试。"

// ReplyReserve is how many sends of a conversation's budget replies
// without a task (busy, refusals, commands) leave for a running answer:
// its progress, its window close and its final frame.
const ReplyReserve = 3

// New validates cfg.
func New(cfg Config) (*Access, error) {
	if cfg.Dispatch == nil || cfg.NodeID == "" {
		return nil, errors.New("access: NodeID and Dispatch are required")
	}
	def, err := NewRules(Rules{AllowUsers: cfg.AllowUsers, AllowChats: cfg.AllowChats, MaxQuestionBytes: cfg.MaxQuestionBytes, Texts: cfg.Texts})
	if err != nil {
		return nil, err
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 2048
	}
	if cfg.DedupeSize <= 0 {
		cfg.DedupeSize = 65536
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Media == nil {
		cfg.Media = media.New(media.Config{})
	}
	if cfg.MediaDrain <= 0 {
		cfg.MediaDrain = 10 * time.Second
	}
	cfg.Clock = clock.Or(cfg.Clock)
	a := &Access{
		cfg: cfg, log: cfg.Logger.With().Str("component", "access").Logger(), def: def,
		sem: make(chan struct{}, cfg.Parallel), seen: newLRU(cfg.DedupeSize), arrived: newLRU(cfg.DedupeSize),
		terms: map[*election.Term]*termCalls{},
	}
	if cfg.Store != nil {
		a.Bind(cfg.Store, cfg.Lifecycle)
	}
	return a, nil
}

func set(xs []string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// Stats returns the counters.
func (a *Access) Stats() Stats {
	a.statsMu.Lock()
	defer a.statsMu.Unlock()
	return a.stats
}

func (a *Access) count(f func(*Stats)) {
	a.statsMu.Lock()
	f(&a.stats)
	a.statsMu.Unlock()
}

// Wait returns when every message being handled is done, and the seen
// marks JetStream refused have been tried once more (marks.go).
func (a *Access) Wait() {
	a.stopMarks()
	a.wg.Wait()
}

// termCalls is the callbacks of one term's connection in hand.
type termCalls struct {
	wg sync.WaitGroup
	n  int // in hand now, under Access.termsMu
}

// track counts a callback of term's connection until done is called.
func (a *Access) track(term *election.Term) (done func()) {
	a.termsMu.Lock()
	defer a.termsMu.Unlock()
	tc := a.terms[term]
	if tc == nil {
		tc = &termCalls{}
		a.terms[term] = tc
	}
	tc.wg.Add(1)
	tc.n++
	return func() {
		a.termsMu.Lock()
		tc.n--
		a.termsMu.Unlock()
		tc.wg.Done()
	}
}

// Handling reports whether a callback of term's connection is being
// handled now (read, not yet handled to the end).
func (a *Access) Handling(term *election.Term) bool {
	a.termsMu.Lock()
	defer a.termsMu.Unlock()
	tc := a.terms[term]
	return tc != nil && tc.n > 0
}

// WaitTerm returns once every callback of term's connection has been
// handled to the end (published, recorded, receipt attempted), or when
// ctx ends. The node calls it after the connection is gone and before it
// resigns (node.TermHooks.Drain), so a deploy loses no message WeCom
// delivered.
func (a *Access) WaitTerm(ctx context.Context, term *election.Term) {
	a.termsMu.Lock()
	tc := a.terms[term]
	delete(a.terms, term)
	a.termsMu.Unlock()
	if tc == nil {
		return
	}
	done := make(chan struct{})
	go func() { tc.wg.Wait(); close(done) }() // ends with the handlers (each bounded by a few Timeouts)
	select {
	case <-done:
	case <-ctx.Done():
		a.log.Warn().Str("bot", term.Bot).Int64("term", term.Rev).Msg("callbacks still being handled at the drain deadline; resigning anyway")
	}
}

// HandleMessage takes a callback off the connection's goroutine, waiting
// for a free slot when Parallel messages are being handled (back-pressure
// on the connection's callback queue, never a dropped message).
//
// A callback the connection read is handled to the end (published,
// recorded, receipt attempted) even when the term ends meanwhile: WeCom
// will not deliver it again. Wait reports when every one is done.
func (a *Access) HandleMessage(term *election.Term, c *wecom.Conn, reqID string, m *wecom.MsgCallback) {
	read := a.cfg.Now()
	a.count(func(s *Stats) { s.Received++ })
	a.remember(term.Bot, m)
	// In hand from now (in the connection's order): a later message of
	// the conversation sees this one before it is published.
	inHand := term.Bot + "\x00" + m.Conversation()
	a.inHand.Add(inHand, 1)
	in := a.arrive(term, c, reqID, m, read)
	// Dispatched after the messages with files read before it (order.go).
	in.ahead, in.gate = a.gates.enter(inHand, len(media.Items(m)) > 0, read.Add(a.cfg.Media.MessageTimeout()+a.cfg.Timeout))
	done := a.track(term)
	a.sem <- struct{}{}
	a.wg.Go(func() {
		defer done()
		defer a.inHand.Add(inHand, -1)
		defer a.gates.leave(inHand, in.gate)
		// The slot is given back at the end, or before a download of the
		// message's files (media.go): those wait on the media slots and
		// their deadline, never holding a slot text messages need.
		slot := &heldSlot{sem: a.sem}
		defer slot.free()
		if a.cfg.Metrics != nil {
			a.cfg.Metrics.Stage(term.Bot, "slot", a.cfg.Now().Sub(read))
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(term.Context()), a.cfg.Timeout)
		defer cancel()
		a.handle(ctx, term, c, reqID, m, in, slot)
	})
}

// heldSlot is a handling's slot of Access.sem, given back once.
type heldSlot struct {
	once sync.Once
	sem  chan struct{}
}

func (s *heldSlot) free() { s.once.Do(func() { <-s.sem }) }

// arrival is what is decided about a callback where it is taken, in the
// connection's callback order, from memory alone.
type arrival struct {
	read  time.Time
	valid bool // msgid, user and req_id present
	first bool // new to the dedupe memory
	fresh bool // cannot be a duplicate (Access.fresh)
	// early: the receipt, written already (nil: not early). The handler
	// waits for its ack.
	early *earlyReceipt
	// ahead: the messages with files of the conversation read before this
	// one and not yet dispatched; gate: this one's, if it has files
	// (order.go).
	ahead []*gate
	gate  *gate
}

// earlyReceipt is a receipt written before the publish.
type earlyReceipt struct {
	p    *wecom.Pending // nil if the write failed (err)
	err  error
	sent time.Time
}

// arrive decides what memory can about callback m: valid, new to the
// dedupe memory, fresh, and whether its receipt goes now (see the package
// doc): a fresh message that takes a task (allowed, supported, fit, not a
// command) in a conversation predicted idle, with no other message of it
// in hand.
func (a *Access) arrive(term *election.Term, c *wecom.Conn, reqID string, m *wecom.MsgCallback, read time.Time) arrival {
	in := arrival{read: read, valid: m.MsgID != "" && m.From.UserID != "" && reqID != ""}
	if !in.valid {
		return in
	}
	in.first = a.seen.add(term.Bot + "\x00" + m.MsgID)
	if !in.first {
		return in
	}
	in.fresh = a.fresh(c, m)
	chat, r := m.Conversation(), a.rules(term.Bot)
	if !in.fresh || a.cfg.Outbound == nil || a.inHand.Get(term.Bot+"\x00"+chat) != 1 || !r.takesTask(m) || !a.cfg.Outbound.Idle(term.Bot, chat) {
		return in
	}
	a.count(func(s *Stats) { s.EarlyReceipts++ })
	// The wait for the req_id's turn: none for a new callback's.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(term.Context()), a.cfg.Timeout)
	defer cancel()
	e := &earlyReceipt{sent: time.Now()}
	id := task.ID(term.Bot, m.MsgID)
	e.p, e.err = c.SendStream(sctx, reqID, wecom.Stream{ID: "s-" + id, Content: r.Texts.Receipt, Feedback: feedbackOf(id)})
	in.early = e
	return in
}

// screening is what the checks before the dispatch say of a message,
// in order: not on the allowlist, of an unsupported type, unfit (empty,
// too long), a command, or a question that takes a task.
type screening int

const (
	screenTask screening = iota
	screenRefused
	screenUnsupported
	screenUnfit
	screenCommand
)

// takesTask reports whether m would be dispatched as a task.
func (r *Rules) takesTask(m *wecom.MsgCallback) bool {
	verdict, _ := r.screen(m)
	return verdict == screenTask
}

// screen runs those checks on m and returns the trimmed question. arrive
// and the handling both ask it, so an early receipt never goes to a
// message the handling then answers without a task.
func (r *Rules) screen(m *wecom.MsgCallback) (screening, string) {
	if !r.allowed(m.From.UserID, m.Conversation(), m.ChatType) {
		return screenRefused, ""
	}
	if !supportedType(m.MsgType) {
		return screenUnsupported, ""
	}
	question := strings.TrimSpace(m.PlainText())
	files := len(media.Items(m)) > 0
	if strings.HasPrefix(question, "/") && !files {
		if r.unfit(question) != "" {
			return screenUnfit, question
		}
		return screenCommand, question
	}
	question = withQuote(m, question)
	switch {
	case question == "" && files: // an image alone: the files are the question
		return screenTask, question
	case r.unfit(question) != "":
		return screenUnfit, question
	}
	return screenTask, question
}

// HandleEvent answers enter_chat with the welcome text, if one is set,
// records a feedback_event with its task (feedback.go), and routes a
// template_card_event to its task's backend (cards.go).
func (a *Access) HandleEvent(term *election.Term, c *wecom.Conn, reqID string, ev *wecom.EventCallback) {
	switch ev.Event.EventType {
	case wecom.EventFeedback:
		a.feedback(term, ev)
		return
	case wecom.EventTemplateCardEvent:
		a.cardEvent(term, c, reqID, ev)
		return
	case wecom.EventEnterCheckUpdate:
		a.reportVersion(term, c, reqID)
		return
	}
	texts := a.rules(term.Bot).Texts
	welcome, card := texts.Welcome, texts.WelcomeCard
	if ev.Event.EventType != wecom.EventEnterChat || welcome == "" && card == "" {
		return
	}
	done := a.track(term)
	a.sem <- struct{}{} // events share the bound with messages
	a.wg.Go(func() {
		defer done()
		defer func() { <-a.sem }()
		ctx, cancel := context.WithTimeout(term.Context(), 5*time.Second) // WeCom's welcome window
		defer cancel()
		body := &wecom.WelcomeBody{MsgType: wecom.MsgTypeText, Text: &wecom.TextContent{Content: welcome}}
		if card != "" {
			body = &wecom.WelcomeBody{MsgType: wecom.MsgTypeTemplateCard, TemplateCard: json.RawMessage(card)}
		}
		if err := c.ReplyWelcome(ctx, reqID, body); err != nil {
			a.log.Warn().Err(err).Str("bot", term.Bot).Msg("welcome failed")
		}
	})
}

// reportVersion answers enter_check_update with the version the bot's
// rules give, as the official plugin answers it (ww_ai_robot_enter_event,
// {"version": …}, within the event window).
func (a *Access) reportVersion(term *election.Term, c *wecom.Conn, reqID string) {
	version := a.rules(term.Bot).Texts.Version
	done := a.track(term)
	a.sem <- struct{}{} // events share the bound with messages
	a.wg.Go(func() {
		defer done()
		defer func() { <-a.sem }()
		ctx, cancel := context.WithTimeout(term.Context(), 5*time.Second) // the event's window
		defer cancel()
		if err := c.ReplyVersion(ctx, reqID, version); err != nil {
			a.log.Warn().Err(err).Str("bot", term.Bot).Msg("version report failed")
		}
	})
}

// refuseLater records rec as a task refused busy (Lifecycle.Refused):
// the busy reply the budget held back, which the pusher then sends once,
// as the final frame of rec's own stream (or a push quoting its question
// after a handover). Nothing runs it: it never enters the queue.
//
// JetStream may be electing a stream leader (a NATS server just died):
// the write is tried again for up to refusePatience before giving up.
func (a *Access) refuseLater(ctx context.Context, js *bound, rec *task.Record) error {
	if js == nil {
		return errors.New("JetStream not reachable")
	}
	const why = "busy: the conversation's earlier question was still being answered; the reply waited for the send budget"
	ctx = context.WithoutCancel(ctx)
	// Waited on the real clock: cfg.Now may be a test's.
	return retry.Until(ctx, nil, retry.New(250*time.Millisecond, 4*time.Second), refusePatience, func() error {
		tctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
		defer cancel()
		_, err := js.lc.Refused(tctx, task.MessageOf(rec), why, true)
		if err != nil {
			a.log.Debug().Err(err).Str("task", rec.ID).Msg("busy refusal not recorded yet; retrying")
		}
		return err
	}, nil)
}

// refusePatience is how long refuseLater keeps trying: longer than a
// JetStream stream leader election (seconds), short enough that a user
// whose refusal cannot be recorded still gets it soon.
const refusePatience = 20 * time.Second

// markSeen records that a message was handled without a task.
func (a *Access) markSeen(ctx context.Context, js *bound, bot, msgid string, created time.Time) {
	if js == nil {
		return
	}
	if err := js.store.MarkSeen(ctx, bot, msgid); err != nil {
		a.log.Debug().Err(err).Str("msgid", msgid).Msg("message not marked seen yet; kept to be written once JetStream answers")
		a.keepMark(js, bot, msgid, created)
		return
	}
	a.handled(bot, created)
}

func (a *Access) handled(bot string, created time.Time) {
	if a.cfg.Watermark != nil {
		a.cfg.Watermark.Handled(bot, created)
	}
}
