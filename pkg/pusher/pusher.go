// Package pusher is the leader's single path back to users: it streams
// each task's answer from the output bucket to WeCom, within the stream
// window and each conversation's quota, and carries on across failovers.
//
// A Pusher runs inside one leader term, for one bot, on that term's
// connection. It keeps an active set of the tasks it delivers, and scans
// it every ScanInterval, and soon after anything arrives or a step's wait
// ends the tasks it concerns (due.go): for each task
// it pushes only when there is something new for the user: changed
// content, a heartbeat when nothing new came for a while, the stream's
// close before its window ends, the final answer. A task's delivery is a
// state machine (phase.go): progress, closing, final, handoff, parts,
// until done.
//
// How a task reaches the pusher: five sources, each a producer of one
// inbox (inbox.go), the only way into the active set. The task records
// are the truth; each source covers a way the others can miss a task or
// learn of it late:
//
//   - rebuild, at the term's start: every task of the bot not yet
//     delivered, from the undelivered index (jetstream.Store.UndeliveredTasks,
//     which every path that creates a record or reopens its delivery
//     writes, and delivery clears). Covers failover: what the previous
//     leader left owed.
//   - inbound (Notify, NotifyChat): this node's inbound path dispatched the
//     task. The earliest word, and it names the conversation before any
//     record is read (Idle).
//   - notice (Names.NoticeSubject, core NATS): a record changed where the
//     pusher must act at once, on any node: an execution ended (the
//     notice often carries the record: the final frame needs no read), a
//     delivery reopened. Without it an ending that writes no output (a
//     failure, a cancel) waits for the record's refresh.
//   - output watch: a worker wrote the task's output; it resumes from the
//     bot's persisted Watermark, so output written between terms is seen.
//     Progress frames follow the output at once, not at the next refresh.
//   - resync, every ResyncEvery: the undelivered index again, for a task
//     whose only announcement was lost (a notice sent while the connection
//     was reconnecting, a refusal recorded with no output to watch).
//     Without it such a task waited for the next term's rebuild.
//   - reconnect (reconnect.go): the node's NATS connection came back.
//     Notices sent while it was away are lost, and the output watch's
//     consumer may be on the server it left: every active task's record
//     and output are read again and the watch is made again. Without it
//     an answer that ended during a NATS server's freeze waited for the
//     record's refresh (30 s).
//
// Where the answer goes:
//
//   - stream (phases progress, final): the task's stream began on this
//     term's connection (its req_id is valid here) and its window is open:
//     progress updates, then the final frame. Delivered when WeCom acks
//     the final frame. An answer too long for one frame (20,480 bytes) is
//     split into parts labelled "(1/n)" … "(n/n)" (Parts, the one
//     splitter): the final frame carries the first, the rest are pushed.
//   - push (phase closing or handoff, then parts): the stream's window is
//     closing (the stream is closed with the content so far and a note;
//     delivery truncated), the stream began under another term (WeCom
//     rejects an old connection's req_id, 846605), or the user's device
//     cannot show streams (600039): the complete answer is pushed with
//     aibot_send_msg as markdown, split by Parts at paragraph boundaries,
//     each part recorded as it is acked. Delivered after the last part.
//
// Every send to a conversation spends its Budget (shared with the inbound
// path), keeping a reserve so progress updates never starve the final
// frame. The record keeps what the user last saw (a hash and the time), so
// a new leader does not resend it.
//
// What is not closed: WeCom has no query for what a user saw. If the
// leader dies after WeCom applied a final frame or a pushed part but before
// the record says so, the next leader sends it again: this design errs
// toward a duplicate, never toward a user left without the answer. The
// window is narrowed by writing the intent (FinalPending) before each
// final frame and the outcome (delivered, PushedParts) right after its
// ack; a new leader that finds an intent without an outcome counts it
// (Stats.Ambiguous). The same holds for a frame WeCom applies but never
// acks (an ack stall): while the connection owes an ack
// (wecom.Conn.AcksOverdue) the pusher sends nothing, so only the frames
// already in flight when the acks stopped have an unknown outcome
// (Stats.Stalled counts the held steps). A pushed part whose ack came but
// whose count's write failed is not sent again by the same pusher: the
// count is kept in memory and its write retried (ledger.partPushed).
package pusher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/retry"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Config configures one term's pusher. Zero values take the defaults named.
type Config struct {
	Bot    string
	NodeID string
	// TermRev is the revision of the election term Conn belongs to
	// (election.Term.Rev): a stream begun under another revision
	// (task.Record.Term) is not continued here, its answer is pushed.
	TermRev int64
	Conn    *wecom.Conn
	Store   *jetstream.Store
	// Lifecycle records every delivery step (a *task.Lifecycle).
	// Default: one on Store.
	Lifecycle Deliveries
	// Metrics, if set, hears the push lag and the store's failures (see
	// Metrics).
	Metrics Metrics
	// Budget paces every conversation; shared with the inbound path.
	Budget *pace.Budget
	// Uploads paces the bot's media uploads (a reply's files, keyed by
	// the bot) under WeCom's upload caps. Default UploadBudget.
	Uploads *pace.Budget
	// ScanInterval is the period of the scan of every active task
	// (between, a scan looks only at the tasks that changed or whose
	// wait ended: due.go). Default 1s.
	ScanInterval time.Duration
	// ResyncEvery is the period of the undelivered index read that finds
	// tasks whose announcement was lost. Default ResyncEvery (1m).
	ResyncEvery time.Duration
	// Heartbeat: when nothing new has been shown for this long, the user
	// sees the content so far with a status line. Default 20s.
	Heartbeat time.Duration
	// HeartbeatLine is the status line, with minutes and seconds elapsed.
	// Default "已进行 %d 分 %02d 秒，仍在处理中".
	HeartbeatLine string
	// QueuedLine replaces HeartbeatLine while the task waits for a worker.
	// Default "排队中，已等待 %d 分 %02d 秒，马上轮到你".
	QueuedLine string
	// StreamWindow is WeCom's stream lifetime from the first frame; Margin
	// is how long before its end the stream is closed. Defaults 6m, 30s.
	StreamWindow, Margin time.Duration
	// TruncatedNote ends a stream closed before the answer was complete.
	TruncatedNote string
	// HandoverNote ends a stream closed by Handover: this node hands the
	// bot over, and the next leader cannot continue the stream.
	// Default "（服务切换中，完整回答稍后单独发送）".
	HandoverNote string
	// CanceledNote and FailedNote end answers that were stopped or failed.
	CanceledNote, FailedNote string
	// BusyNote is the answer of a task refused late as busy (Record.Busy):
	// the inbound path's busy reply. Default: FailedNote.
	BusyNote string
	// LateNote starts the answer to a message the bot missed (found by the
	// gap backfill). Default "（抱歉，这条消息因系统故障未能及时回复，以下是迟到的回答）".
	LateNote string
	// Notes, if set, gives the bot's late note and busy reply as they are
	// now (a bot's settings change at run time), over LateNote and
	// BusyNote.
	Notes Notes
	// Thinking, if set, says what the bot shows of a backend's thinking
	// (thinking.go), as it is now; nil shows none.
	Thinking Thinking
	// IncompleteNote starts the answer in a conversation marked "may be
	// incomplete". Default "（提示：系统故障期间你发送的部分消息可能未被处理；如有问题没有得到回答，请重新发送。）".
	IncompleteNote string
	// Parallel bounds concurrent steps (each a few bucket operations and
	// one WeCom round trip, so mostly waiting). Default 256.
	Parallel int
	// MaxAttempts bounds the attempts of a push before delivery fails.
	// Default 8, with backoff from 1s doubling to 1m.
	MaxAttempts int
	// Gate, if set, is asked before each proactive push of a complete
	// answer (see Gate).
	Gate Gate
	// ReplayExpiry: an answer still owed by push this long after its
	// execution ended is not sent late; its delivery fails for good
	// (Health hears it). Default 24h.
	ReplayExpiry time.Duration
	// Health, if set, hears every delivery that failed for good (see
	// Health).
	Health Health
	Logger zerolog.Logger
	// Now is the clock (a test seam). Default time.Now.
	Now func() time.Time
	// Clock is what the scan's ticks and sleeps wait on. Default
	// clock.Real.
	Clock clock.Clock
}

// Metrics hears what the pusher measures, for the node's metrics. Its
// methods are called on the delivery path: they must not block.
type Metrics interface {
	// PushLag learns the push lag of each progress frame acked with new
	// content: from the worker's output write to WeCom's ack.
	PushLag(bot string, d time.Duration)
	// NATSError hears the operation ("record_read", "record_write",
	// "output_read", "output_status", "output_watch", "watermark_read",
	// "watermark_write") each time a read or write of the store fails
	// because JetStream did: unreachable, a timeout, an API error. Not for
	// what the lifecycle answers (a task finished or superseded, a
	// transition not allowed), a key not found, or a value that does not
	// decode.
	NATSError(op string)
}

// Gate paces the proactive pushes of complete answers. The health
// monitor's half-open recovery (recovery.Gate) holds the backlog while it
// probes, then drains it below the bot's normal rate.
type Gate interface {
	// Wait is how long to wait before the next push (0: push now).
	Wait(now time.Time) time.Duration
}

// Notes are the bot's own notes, asked each time one is shown: quick,
// from memory, not blocking. An empty note is Config's.
type Notes interface {
	Notes(bot string) (late, busy string)
}

// Health hears every delivery that failed for good: a person must know,
// the user never got the answer (health.Health opens an incident).
type Health interface {
	DeliveryFailed(r *task.Record, err error)
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ScanInterval, time.Second)
	def(&c.ResyncEvery, ResyncEvery)
	def(&c.Heartbeat, 20*time.Second)
	def(&c.StreamWindow, 6*time.Minute)
	def(&c.Margin, 30*time.Second)
	if c.HeartbeatLine == "" {
		c.HeartbeatLine = "已进行 %d 分 %02d 秒，仍在处理中"
	}
	if c.QueuedLine == "" {
		c.QueuedLine = "排队中，已等待 %d 分 %02d 秒，马上轮到你"
	}
	if c.TruncatedNote == "" {
		c.TruncatedNote = "（回答较长，完整内容稍后单独发送）"
	}
	if c.HandoverNote == "" {
		c.HandoverNote = "（服务切换中，完整回答稍后单独发送）"
	}
	if c.CanceledNote == "" {
		c.CanceledNote = "（已停止）"
	}
	if c.ReplayExpiry <= 0 {
		c.ReplayExpiry = 24 * time.Hour
	}
	if c.IncompleteNote == "" {
		c.IncompleteNote = "（提示：系统故障期间你发送的部分消息可能未被处理；如有问题没有得到回答，请重新发送。）"
	}
	if c.LateNote == "" {
		c.LateNote = "（抱歉，这条消息因系统故障未能及时回复，以下是迟到的回答）"
	}
	if c.FailedNote == "" {
		c.FailedNote = "抱歉，这个问题处理失败了，请稍后重试。"
	}
	if c.BusyNote == "" {
		c.BusyNote = c.FailedNote
	}
	if c.Parallel <= 0 {
		c.Parallel = 256
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 8
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Uploads == nil {
		c.Uploads = UploadBudget(c.Now)
	}
}

// minScanGap coalesces wakes: output writes arrive by the thousand per
// second at scale, and one scan serves them all.
const minScanGap = 50 * time.Millisecond

// Stats counts what a pusher did in its term.
type Stats struct {
	Frames    int64 `json:"frames"`    // stream frames acked
	Pushes    int64 `json:"pushes"`    // aibot_send_msg parts acked
	Uploads   int64 `json:"uploads"`   // a reply's files uploaded
	Delivered int64 `json:"delivered"` // tasks delivered
	Truncated int64 `json:"truncated"` // streams closed before the answer was complete
	Failed    int64 `json:"failed"`    // deliveries given up
	Errors    int64 `json:"errors"`    // sends refused or unanswered
	Ambiguous int64 `json:"ambiguous"` // finals found sent-but-unrecorded (may be seen twice)
	Throttled int64 `json:"throttled"` // sends deferred by the budget, and uploads by the upload budget
	// Flushes: requests to a worker for its text now, before a frame
	// that would show a version older than a second (flush.go).
	Flushes int64 `json:"flushes"`
	// QuotaRefused: sends WeCom refused for the conversation's quota
	// (45009; also counted in Errors): each lowered its budget.
	QuotaRefused int64 `json:"quota_refused"`
	Held         int64 `json:"held"`     // pushes deferred by the recovery gate (half-open)
	Stalled      int64 `json:"stalled"`  // steps deferred while the connection's acks were overdue
	Active       int   `json:"active"`   // tasks being delivered now
	RebuiltNum   int   `json:"rebuilt"`  // active tasks found at term start
	Resynced     int64 `json:"resynced"` // undelivered tasks found by the resync, never announced to this pusher
	// Reconnects: times the NATS connection came back, each making every
	// active task's record and output stale (reconnect.go).
	Reconnects int64 `json:"reconnects"`
}

// Pusher delivers one bot's answers during one term.
type Pusher struct {
	cfg   Config
	rules rules // what the plan reads of cfg (plan.go)
	log   zerolog.Logger
	store Buckets // Config.Store: what lies beside the records

	// ledger is the only writer of task records here (ledger.go).
	ledger ledger

	// in is the one way into the active set (inbox.go).
	in inbox

	mu      sync.Mutex
	active  map[string]*entry
	due     due       // which tasks the next scan looks at (due.go)
	chats   chatIndex // active tasks per conversation, of those named (Idle)
	stats   Stats
	lastRev uint64 // last output revision the watch delivered
	savedWM uint64 // watermark last written
	// doneInResync: the tasks whose delivery ended while a resync read
	// the undelivered index (nil: no resync reading). Its read may
	// predate their leaving the index: they are not put back (resync).
	doneInResync map[string]bool
	// watchHold, when set (a test seam: HoldWatch), holds the output
	// watch until it closes, before its consumer is made: a watch made late.
	watchHold <-chan struct{}
	// handingOver: Handover runs; every stream still open is closed
	// (rules.phaseOf).
	handingOver atomic.Bool
	// handoverPass, when set (tests), is told after each of Handover's
	// passes the number of tasks it takes again.
	handoverPass passObserver
}

// New validates cfg.
func New(cfg Config) (*Pusher, error) {
	cfg.setDefaults()
	switch {
	case cfg.Bot == "" || cfg.Conn == nil || cfg.Store == nil || cfg.Budget == nil:
		return nil, errors.New("pusher: Bot, Conn, Store and Budget are required")
	case cfg.Margin >= cfg.StreamWindow:
		return nil, fmt.Errorf("pusher: Margin (%s) must be less than StreamWindow (%s)", cfg.Margin, cfg.StreamWindow)
	}
	if cfg.Lifecycle == nil {
		cfg.Lifecycle = task.NewLifecycle(cfg.Store, cfg.NodeID, cfg.Logger).WithClock(cfg.Now)
	}
	p := &Pusher{cfg: cfg, rules: cfg.rules(), store: cfg.Store, active: map[string]*entry{}, in: newInbox(),
		log: cfg.Logger.With().Str("bot", cfg.Bot).Int64("term", cfg.TermRev).Str("component", "pusher").Logger()}
	p.ledger = ledger{p}
	return p, nil
}

// Stats returns the counters.
func (p *Pusher) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Active = len(p.active)
	return s
}

func (p *Pusher) count(f func(*Stats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}

// storeError tells Config.Metrics about err, from op on the store, if it
// is JetStream failing (task.StoreFailed).
func (p *Pusher) storeError(op string, err error) {
	if p.cfg.Metrics != nil && task.StoreFailed(err) {
		p.cfg.Metrics.NATSError(op)
	}
}

// Run delivers until ctx (the term) ends, then waits for sends in flight.
func (p *Pusher) Run(ctx context.Context) error {
	from := p.watchFrom(ctx)
	// The records are the truth: without them the first scan could miss a
	// task, so keep trying (JetStream may be recovering) until the term ends.
	for backoff := retry.New(time.Second, 30*time.Second); ; {
		err := p.rebuild(ctx)
		if err == nil {
			break
		}
		wait := backoff.Next()
		p.log.Warn().Err(err).Dur("retry_in", wait).Msg("cannot read task records to rebuild the active set; retrying")
		pause.For(ctx, wait)
		if ctx.Err() != nil {
			return nil
		}
	}
	// Ended executions and reopened deliveries are announced: step them
	// now, not at the next refresh of their record.
	sub, err := p.store.JetStream().Conn().Subscribe(p.store.Names().NoticeSubject(p.cfg.Bot), func(m *nats.Msg) { p.noticed(task.NoticeOf(m)) })
	if err != nil {
		p.log.Warn().Err(err).Msg("no notices of ended tasks; records are re-read every few seconds instead")
	} else {
		defer sub.Unsubscribe()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { p.watch(ctx, from) })
	wg.Go(func() { p.followReconnects(ctx) })
	sem := make(chan struct{}, p.cfg.Parallel)
	clk := clock.Or(p.cfg.Clock)
	t := clk.NewTicker(p.cfg.ScanInterval)
	defer t.Stop()
	resync := clk.NewTicker(p.cfg.ResyncEvery)
	defer resync.Stop()
	waits := clk.NewTimer(p.cfg.ScanInterval)
	defer waits.Stop()
	all := true // the first scan, and each tick's, looks at every task (due.go)
	for {
		interrupted := p.scan(ctx, &wg, sem, all)
		all = false
		if interrupted {
			// Interrupted by a notice: scan again at once, after the
			// periodic work if it is due (never starved by notices).
			select {
			case <-resync.C():
				p.resync(ctx)
			case <-t.C():
				p.saveWatermark(ctx)
				all = true
			default:
			}
			continue
		}
		for slept := false; !slept; {
			slept = true
			waits.Reset(p.untilWait())
			select {
			case <-ctx.Done():
				return nil
			case <-resync.C():
				p.resync(ctx)
			case <-t.C():
				p.saveWatermark(ctx)
				all = true
			case <-waits.C():
			case <-p.in.waited:
				slept = false // a step's wait ends sooner than this sleep: sleep again, shorter
			case <-p.in.wake:
				pause.For(ctx, minScanGap)
			}
		}
	}
}

// untilWait is how long the scan may sleep before a step's wait ends
// (due.go): at least minScanGap, so that thousands of waits ending a
// moment apart share one scan, and at most ScanInterval (the tick scans
// then anyway).
func (p *Pusher) untilWait() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	at, ok := p.nextWait()
	d := sleepFor(now, at, ok, p.cfg.ScanInterval)
	p.due.armed = now.Add(d)
	return d
}

// sleepFor is how long the scan sleeps at now when the earliest step's
// wait ends at next (ok false: none waits): until next, but at least
// minScanGap and at most scan (the tick's period).
func sleepFor(now, next time.Time, ok bool, scan time.Duration) time.Duration {
	if !ok {
		return scan
	}
	return min(max(next.Sub(now), minScanGap), scan)
}
