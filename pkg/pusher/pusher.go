// Package pusher is the leader's single path back to users: it streams
// each task's answer from the output bucket to WeCom, within the stream
// window and each conversation's quota, and carries on across failovers.
//
// A Pusher runs inside one leader term, for one bot, on that term's
// connection. At start it rebuilds its set of active tasks from the task
// records of every task not yet delivered (found through the pending
// index, which every path that creates a record or reopens its delivery
// writes, and delivery clears), then keeps it current from the
// inbound path (Notify) and a watch on the output bucket that resumes from
// the bot's persisted Watermark, and scans it every ScanInterval. For each task it pushes only when there is something
// new for the user: changed content, a heartbeat when nothing new came for
// a while, the stream's close before its window ends, the final answer.
//
// Where the answer goes:
//
//   - stream: the task's stream began on this term's connection (its req_id
//     is valid here) and its window is open: progress updates, then the
//     final frame. Delivered when WeCom acks the final frame.
//   - push: the stream's window is closing (the stream is closed with the
//     content so far and a note; delivery truncated), the answer does not
//     fit one frame, or the stream began under another term (WeCom rejects
//     an old connection's req_id, 846605): the complete answer is pushed
//     with aibot_send_msg as markdown, split at paragraph boundaries, each
//     part recorded as it is acked. Delivered after the last part.
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
// window is narrowed by writing the intent (FinalPending, PushedParts)
// before each final send and the outcome right after its ack; a new leader
// that finds an intent without an outcome counts it (Stats.Ambiguous).
// The same holds for a frame WeCom applies but never acks (an ack stall):
// while the connection owes an ack (wecom.Conn.AcksOverdue) the pusher
// sends nothing, so only the frames already in flight when the acks
// stopped have an unknown outcome (Stats.Stalled counts the held steps).
package pusher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Config configures one term's pusher. Zero values take the defaults named.
type Config struct {
	Bot    string
	NodeID string
	Term   int64 // the leader term (election revision) of Conn
	Conn   *wecom.Conn
	Store  *jetstream.Store
	// Lifecycle records every delivery step. Default: one on Store.
	Lifecycle *task.Lifecycle
	// Lag, if set, learns the push lag of each progress frame acked with
	// new content: from the worker's output write to WeCom's ack (metrics;
	// must not block).
	Lag func(bot string, d time.Duration)
	// Budget paces every conversation; shared with the inbound path.
	Budget *pace.Budget
	// ScanInterval is the period of the scan of active tasks. Default 1s.
	ScanInterval time.Duration
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
	// CanceledNote and FailedNote end answers that were stopped or failed.
	CanceledNote, FailedNote string
	// BusyNote is the answer of a task refused late as busy (Record.Busy):
	// the inbound path's busy reply. Default: FailedNote.
	BusyNote string
	// LateNote starts the answer to a message the bot missed (found by the
	// gap backfill). Default "（抱歉，这条消息因系统故障未能及时回复，以下是迟到的回答）".
	LateNote string
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
	// answer; it returns how long to wait first (0: push now). The health
	// monitor's half-open recovery holds the backlog while it probes, then
	// drains it below the bot's normal rate.
	Gate func(now time.Time) time.Duration
	// ReplayExpiry: an answer still owed by push this long after its
	// execution ended is not sent late; its delivery fails for good
	// (FailedForGood hears it). Default 24h.
	ReplayExpiry time.Duration
	// FailedForGood, if set, hears every delivery that failed for good
	// (a person must know: the user never got the answer).
	FailedForGood func(r *task.Record, err error)
	Logger        zerolog.Logger
	Now           func() time.Time
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ScanInterval, time.Second)
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
}

// finalReserve is how many sends of a conversation's budget per minute
// progress frames leave alone: the final frame and the window's close.
const finalReserve = 2

// progressGap is the least time between two progress frames of a stream:
// a minute spread over the budget less the reserve.
func progressGap(budget int) time.Duration {
	return time.Minute / time.Duration(max(budget-finalReserve, 1))
}

// minScanGap coalesces wakes: output writes arrive by the thousand per
// second at scale, and one scan serves them all.
const minScanGap = 50 * time.Millisecond

// stepTimeout bounds one step of one task: a few sends and record writes.
const stepTimeout = 30 * time.Second

// ackOverdue: while the connection has owed an ack this long (or one timed
// out and nothing was acked since), no frame is sent (wecom.Conn.
// AcksOverdue). A frame sent into a stalled link has an unknown outcome,
// and every later frame of its req_id too; a final frame of unknown
// outcome is pushed again, which the user may see twice. Acks on a working
// link take milliseconds; holding costs a short delay at worst, and only
// the frames already in flight when acks stopped stay ambiguous.
const ackOverdue = 500 * time.Millisecond

// Stats counts what a pusher did in its term.
type Stats struct {
	Frames     int64 `json:"frames"`    // stream frames acked
	Pushes     int64 `json:"pushes"`    // aibot_send_msg parts acked
	Delivered  int64 `json:"delivered"` // tasks delivered
	Truncated  int64 `json:"truncated"` // streams closed before the answer was complete
	Failed     int64 `json:"failed"`    // deliveries given up
	Errors     int64 `json:"errors"`    // sends refused or unanswered
	Ambiguous  int64 `json:"ambiguous"` // finals found sent-but-unrecorded (may be seen twice)
	Throttled  int64 `json:"throttled"` // sends deferred by the budget
	Held       int64 `json:"held"`      // pushes deferred by the recovery gate (half-open)
	Stalled    int64 `json:"stalled"`   // steps deferred while the connection's acks were overdue
	Active     int   `json:"active"`    // tasks being delivered now
	RebuiltNum int   `json:"rebuilt"`   // active tasks found at term start
}

// Pusher delivers one bot's answers during one term.
type Pusher struct {
	cfg Config
	log zerolog.Logger

	mu      sync.Mutex
	active  map[string]*entry
	stats   Stats
	wake    chan struct{}
	lastRev uint64 // last output revision the watch delivered
	savedWM uint64 // watermark last written
}

// Watermark is the pusher's persisted position in the output bucket, per
// bot: every output event at or below OutputRev belongs to a task that is
// finished with (delivered or failed). A new term's watch resumes after it.
// It is written after the work it covers is done, never before.
type Watermark struct {
	OutputRev uint64    `json:"output_rev"`
	Node      string    `json:"node"`
	Term      int64     `json:"term"`
	Updated   time.Time `json:"updated"`
}

type entry struct {
	out       *task.Output // latest output seen (nil: none yet)
	firstRev  uint64       // output bucket revision of the first event seen for it (0: none)
	outHash   string       // task.Hash(out.Text), computed once per output version
	outAt     time.Time    // when the watch delivered out (zero: out was read, not watched)
	rec       *task.Record // the record as last read by a step (nil: never)
	readAt    time.Time    // when rec was read
	inflight  bool
	notBefore time.Time // backoff
	shownAt   time.Time // when the user last saw something new, for heartbeats
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
	return &Pusher{cfg: cfg, active: map[string]*entry{}, wake: make(chan struct{}, 1),
		log: cfg.Logger.With().Str("bot", cfg.Bot).Int64("term", cfg.Term).Str("component", "pusher").Logger()}, nil
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

// Notify adds a task (just dispatched by the inbound path) to the active set.
func (p *Pusher) Notify(taskID string) {
	p.mu.Lock()
	if _, ok := p.active[taskID]; !ok {
		p.active[taskID] = &entry{shownAt: p.cfg.Now()}
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx (the term) ends, then waits for sends in flight.
func (p *Pusher) Run(ctx context.Context) error {
	// The records are the truth: without them the first scan could miss a
	// task, so keep trying (JetStream may be recovering) until the term ends.
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		err := p.rebuild(ctx)
		if err == nil {
			break
		}
		p.log.Warn().Err(err).Dur("retry_in", wait).Msg("cannot read task records to rebuild the active set; retrying")
		sleep(ctx, wait)
		if ctx.Err() != nil {
			return nil
		}
	}
	// Ended executions and reopened deliveries are announced: step them
	// now, not at the next refresh of their record.
	sub, err := p.cfg.Store.JetStream().Conn().Subscribe(task.NoticeSubject(p.cfg.Bot), func(m *nats.Msg) { p.noticed(string(m.Data)) })
	if err != nil {
		p.log.Warn().Err(err).Msg("no notices of ended tasks; records are re-read every few seconds instead")
	} else {
		defer sub.Unsubscribe()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { p.watch(ctx) })
	sem := make(chan struct{}, p.cfg.Parallel)
	t := time.NewTicker(p.cfg.ScanInterval)
	defer t.Stop()
	for {
		p.scan(ctx, &wg, sem)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.saveWatermark(ctx)
		case <-p.wake:
			sleep(ctx, minScanGap)
		}
	}
}

// noticed forgets the cached record of a task whose record changed, so
// that the next scan steps it at once.
func (p *Pusher) noticed(id string) {
	p.mu.Lock()
	en := p.active[id]
	if en == nil {
		en = &entry{shownAt: p.cfg.Now()}
		p.active[id] = en
	}
	en.rec, en.notBefore = nil, time.Time{} // the ending waits for no progress pacing
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// rebuild finds every task of the bot not yet delivered: after a failover
// the first scan finds them all.
func (p *Pusher) rebuild(ctx context.Context) error {
	// The pending index names the bot's undelivered tasks; their records
	// say where each one is. Reading every record would also work, but
	// costs a read per task kept in the bucket (days of them).
	ids, err := p.cfg.Store.PendingTasks(ctx, p.cfg.Bot)
	if err != nil {
		return err
	}
	n := 0
	for _, id := range ids {
		r, _, err := task.Get(ctx, p.cfg.Store.Tasks(), id)
		if errors.Is(err, natsjs.ErrKeyNotFound) {
			p.cfg.Lifecycle.Forget(ctx, p.cfg.Bot, id) // expired with its record
			continue
		}
		if err != nil {
			return err
		}
		if r.Delivery.Finished() {
			p.cfg.Lifecycle.Forget(ctx, p.cfg.Bot, id)
			continue
		}
		// What the previous leader sent in the quota's window counts here.
		p.cfg.Budget.Seed(r.Chat, r.RecentSends)
		if r.FinalPending {
			p.count(func(s *Stats) { s.Ambiguous++ })
			p.log.Warn().Str("task", r.ID).Msg("final frame sent but not recorded by the previous leader: delivering again (the user may see it twice)")
		}
		p.Notify(r.ID)
		n++
	}
	p.count(func(s *Stats) { s.RebuiltNum = n })
	if n > 0 {
		p.log.Info().Int("tasks", n).Msg("active tasks found at term start")
	}
	return nil
}

// watch follows the output bucket: new output for the bot's tasks wakes
// the scan at once instead of at the next tick. The scan alone is enough
// for correctness (the records are the truth); the watch is for latency.
func (p *Pusher) watch(ctx context.Context) {
	from := p.loadWatermark(ctx)
	p.mu.Lock()
	p.lastRev, p.savedWM = from, from
	p.mu.Unlock()
	for ctx.Err() == nil {
		p.mu.Lock()
		from = p.lastRev
		p.mu.Unlock()
		opt := natsjs.UpdatesOnly()
		if from > 0 {
			opt = natsjs.ResumeFromRevision(from + 1)
		}
		w, err := p.cfg.Store.Output().WatchAll(ctx, opt)
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		for e := range w.Updates() {
			if e == nil || e.Operation() != natsjs.KeyValuePut {
				continue // nil: caught up with the watermark
			}
			rev := e.Revision()
			o, err := task.DecodeOutput(e.Value())
			p.mu.Lock()
			p.lastRev = max(p.lastRev, rev)
			p.mu.Unlock()
			if err != nil || o.Bot != p.cfg.Bot {
				continue
			}
			p.mu.Lock()
			en := p.active[o.TaskID]
			if en == nil {
				en = &entry{shownAt: p.cfg.Now()}
				p.active[o.TaskID] = en
			}
			if en.firstRev == 0 {
				en.firstRev = rev
			}
			en.out, en.outHash, en.outAt = o, task.Hash(o.Text), p.cfg.Now()
			p.mu.Unlock()
			select {
			case p.wake <- struct{}{}:
			default:
			}
		}
		w.Stop()
	}
}

func (p *Pusher) watermarkKey() string { return jetstream.BotKey(p.cfg.Bot) }

func (p *Pusher) loadWatermark(ctx context.Context) uint64 {
	e, err := p.cfg.Store.Watermarks().Get(ctx, p.watermarkKey())
	if err != nil {
		return 0
	}
	var wm Watermark
	if json.Unmarshal(e.Value(), &wm) != nil {
		return 0
	}
	return wm.OutputRev
}

// saveWatermark advances the watermark to just below the first output
// event of the oldest task still being delivered (or to the last event
// seen, when none is).
func (p *Pusher) saveWatermark(ctx context.Context) {
	p.mu.Lock()
	wm := p.lastRev
	for _, en := range p.active {
		if en.firstRev > 0 && en.firstRev-1 < wm {
			wm = en.firstRev - 1
		}
	}
	advance := wm > p.savedWM
	p.mu.Unlock()
	if !advance {
		return
	}
	raw, _ := json.Marshal(Watermark{OutputRev: wm, Node: p.cfg.NodeID, Term: p.cfg.Term, Updated: p.cfg.Now().UTC()})
	if _, err := p.cfg.Store.Watermarks().Put(ctx, p.watermarkKey(), raw); err != nil {
		return
	}
	p.mu.Lock()
	p.savedWM = max(p.savedWM, wm)
	p.mu.Unlock()
}

func (p *Pusher) scan(ctx context.Context, wg *sync.WaitGroup, sem chan struct{}) {
	now := p.cfg.Now()
	p.mu.Lock()
	var due []string
	for id, en := range p.active {
		if !en.inflight && !now.Before(en.notBefore) && p.needsStep(en, now) {
			en.inflight = true
			due = append(due, id)
		}
	}
	p.mu.Unlock()
	for _, id := range due {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			p.release(id, false, 0)
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			done, wait := p.step(ctx, id)
			p.release(id, done, wait)
		})
	}
}

// refreshEvery bounds how long a task goes without a fresh read of its
// record, whatever the cache says (an operator may have changed it).
const refreshEvery = 10 * time.Second

// needsStep decides from what is cached (the record as last read, the
// output as last watched) whether a step could have anything to do, so
// that thousands of quiet tasks cost no bucket reads. The caller holds mu.
func (p *Pusher) needsStep(en *entry, now time.Time) bool {
	r := en.rec
	if r == nil || now.Sub(en.readAt) >= refreshEvery || r.Exec.Finished() {
		return true
	}
	if !p.streamable(r, now) {
		return false // push mode waits for the complete answer
	}
	closeAt := r.StreamStart.Add(p.cfg.StreamWindow - p.cfg.Margin)
	if !r.StreamStart.IsZero() && !now.Before(closeAt) {
		return true
	}
	if en.out != nil && en.out.Text != "" && en.outHash != r.PushedHash {
		return true
	}
	shown := en.shownAt
	if r.PushedAt.After(shown) {
		shown = r.PushedAt
	}
	return now.Sub(shown) >= p.cfg.Heartbeat
}

// release ends a step: done drops the task from the active set; wait
// delays its next step.
func (p *Pusher) release(id string, done bool, wait time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	en := p.active[id]
	if en == nil {
		return
	}
	if done {
		delete(p.active, id)
		return
	}
	en.inflight = false
	if wait > 0 {
		en.notBefore = p.cfg.Now().Add(wait)
	}
}

// step moves one task forward; it reports whether the task is finished
// (delivered, failed, or not this bot's), and how long to wait before the
// next step.
func (p *Pusher) step(ctx context.Context, id string) (done bool, wait time.Duration) {
	// A step that has begun runs to its end even if the term is ending: a
	// frame in flight and the record of its outcome belong together. Sends
	// are bounded by the connection's ack timeout, and fail at once when
	// the connection closes (leadership lost).
	if p.cfg.Conn.AcksOverdue(ackOverdue) {
		p.count(func(s *Stats) { s.Stalled++ })
		return false, 250 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stepTimeout)
	defer cancel()
	tasks := p.cfg.Store.Tasks()
	rec, rev, err := task.Get(ctx, tasks, id)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return false, time.Second // the inbound path is still writing it
	}
	if err != nil {
		return false, time.Second
	}
	if rec.Bot != p.cfg.Bot {
		return true, 0
	}
	if rec.Delivery.Finished() {
		p.cfg.Lifecycle.Forget(ctx, rec.Bot, rec.ID) // a stale index entry
		return true, 0
	}
	p.mu.Lock()
	if en := p.active[id]; en != nil {
		en.rec, en.readAt = rec, p.cfg.Now()
	}
	p.mu.Unlock()
	// Only the text of the record's attempt counts: a superseded attempt's
	// output is never shown. Between two attempts (queued again) nothing
	// new is shown.
	text := ""
	if out := p.output(ctx, rec); out != nil && out.Attempt == rec.Attempt && rec.Exec != task.Queued {
		text = out.Text
	}
	if rec.Exec == task.Succeeded && rec.AnswerHash != "" && task.Hash(text) != rec.AnswerHash {
		// The record names an answer this output is not (yet): wait for it.
		p.log.Warn().Str("task", id).Int("attempt", rec.Attempt).Msg("output differs from the recorded answer; waiting")
		return false, time.Second
	}
	now := p.cfg.Now()
	if p.streamable(rec, now) {
		return p.stream(ctx, rec, rev, text, now)
	}
	return p.push(ctx, rec, text, now)
}

// watchFresh: an output the watch delivered this recently is used as it
// is, without reading the bucket. While an answer streams, workers write
// about once a second and the watch delivers each write within
// milliseconds, so the copy is the latest; a copy older than this (a
// quiet answer, or a watch that fell behind or is reconnecting) is read
// again. One bucket read less per progress frame (the profile of the
// load ramp, bench/ramp.md).
const watchFresh = 2 * time.Second

// output is the freshest output of r's task: the watched copy while the
// answer streams and the copy is fresh, or a read (always once the
// execution is over: the final frame shows exactly the last write).
func (p *Pusher) output(ctx context.Context, r *task.Record) *task.Output {
	id := r.ID
	p.mu.Lock()
	if en := p.active[id]; en != nil && en.out != nil && p.cfg.Now().Sub(en.outAt) < watchFresh &&
		en.out.Attempt == r.Attempt && !r.Exec.Finished() {
		o := en.out
		p.mu.Unlock()
		return o
	}
	p.mu.Unlock()
	o, err := task.GetOutput(ctx, p.cfg.Store.Output(), id)
	if err == nil && o != nil {
		h := task.Hash(o.Text)
		p.mu.Lock()
		if en := p.active[id]; en != nil {
			en.out, en.outHash = o, h
		}
		p.mu.Unlock()
		return o
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if en := p.active[id]; en != nil {
		return en.out
	}
	return nil
}

// streamable: the stream can still carry this answer on this connection.
func (p *Pusher) streamable(r *task.Record, now time.Time) bool {
	if r.Term != p.cfg.Term || r.ReqID == "" || r.StreamID == "" {
		return false
	}
	if r.Delivery != task.Pending && r.Delivery != task.Streaming {
		return false
	}
	return r.StreamStart.IsZero() || now.Before(r.StreamStart.Add(p.cfg.StreamWindow))
}

// finalText is what the user should end up with, once r's execution is
// over and text is its attempt's output.
func (p *Pusher) finalText(r *task.Record, text string) string {
	switch r.Exec {
	case task.Canceled:
		text = join(text, p.cfg.CanceledNote)
	case task.Failed:
		if r.Busy {
			text = join(text, p.cfg.BusyNote)
		} else {
			text = join(text, p.cfg.FailedNote)
		}
	}
	if r.Incomplete != "" {
		text = join(p.cfg.IncompleteNote, text)
	}
	if r.Late {
		return join(p.cfg.LateNote, text)
	}
	return text
}

// quote is question as a markdown quote of one line, clipped.
func quote(question string) string {
	q := strings.Join(strings.Fields(question), " ")
	return "> " + Clip(q, 300, "…")
}

func join(text, note string) string {
	if text == "" {
		return note
	}
	return text + "\n\n" + note
}

// lag reports to Config.Lag how long the output of task id last seen
// took to reach the user (acked at shown).
func (p *Pusher) lag(id string, shown time.Time) {
	if p.cfg.Lag == nil {
		return
	}
	var updated time.Time
	p.mu.Lock()
	if en := p.active[id]; en != nil && en.out != nil {
		updated = en.out.Updated
	}
	p.mu.Unlock()
	if !updated.IsZero() && shown.After(updated) {
		p.cfg.Lag(p.cfg.Bot, shown.Sub(updated))
	}
}

// stream moves a streamable task forward; r is its record as read at
// revision rev.
func (p *Pusher) stream(ctx context.Context, r *task.Record, rev uint64, text string, now time.Time) (bool, time.Duration) {
	chat := r.Chat
	closeAt := r.StreamStart.Add(p.cfg.StreamWindow - p.cfg.Margin)
	if r.StreamStart.IsZero() {
		closeAt = now.Add(p.cfg.StreamWindow - p.cfg.Margin)
	}

	// The final frame: never starved (reserve 0), delivered on its ack.
	if r.Exec.Finished() {
		final := p.finalText(r, text)
		if len(final) > wecom.MaxContentBytes {
			return p.closeStream(ctx, r, text, "answer larger than one frame")
		}
		if !p.cfg.Budget.Take(chat, 0) {
			p.count(func(s *Stats) { s.Throttled++ })
			return false, time.Until(p.cfg.Budget.Free(chat))
		}
		if _, err := p.cfg.Lifecycle.FinalIntent(ctx, r.ID); err != nil {
			p.cfg.Budget.Refund(chat)
			return false, time.Second
		}
		err := p.cfg.Conn.ReplyStream(ctx, r.ReqID, wecom.Stream{ID: r.StreamID, Content: final, Finish: true})
		switch code := wecom.ErrCodeOf(err); {
		case err == nil:
			p.count(func(s *Stats) { s.Frames++ })
			p.lag(r.ID, p.cfg.Now())
			return p.delivered(ctx, r, final, "final frame acked", 0)
		case errors.Is(err, wecom.ErrAckUnknown) && !errors.Is(err, wecom.ErrClosed):
			// No ack we can trust for this req_id (a timeout, or an
			// earlier frame's ack still owed): the final may or may not be
			// on the user's screen. Push the answer (its own req_id), so it
			// is there for sure; at worst the user sees it twice.
			p.count(func(s *Stats) { s.Ambiguous++ })
			return p.toPush(ctx, r, "final frame's outcome unknown (no trustworthy ack); pushing the answer")
		case code == wecom.ErrCodeStreamExpired && r.FinalPending && now.Before(r.StreamStart.Add(p.cfg.StreamWindow)):
			// An earlier final frame whose ack was lost was applied: the
			// stream is finished, not expired.
			p.count(func(s *Stats) { s.Ambiguous++ })
			return p.delivered(ctx, r, final, "final frame applied earlier (ack lost)", 0)
		case code == wecom.ErrCodeInvalidReqID || code == wecom.ErrCodeStreamExpired:
			p.cfg.Budget.Refund(chat)
			return p.toPush(ctx, r, fmt.Sprintf("stream refused (errcode %d); pushing the answer", code))
		default:
			return p.sendFailed(ctx, r, err)
		}
	}

	// The window is closing: close the stream with what there is.
	if !now.Before(closeAt) {
		return p.closeStream(ctx, r, text, "stream window closing")
	}

	// Progress: only new content, or a heartbeat when nothing new came.
	changed := text != "" && task.Hash(text) != r.PushedHash
	p.mu.Lock()
	shown := p.active[r.ID].shownAt
	p.mu.Unlock()
	if r.PushedAt.After(shown) {
		shown = r.PushedAt
	}
	heartbeat := now.Sub(shown) >= p.cfg.Heartbeat
	if !changed && !heartbeat {
		return false, min(closeAt.Sub(now), p.cfg.ScanInterval)
	}
	// Pace progress below the budget, so that the final frame and the
	// window's close always find room (progress alone could otherwise use
	// the whole budget and make the final frame wait for the window).
	gap := progressGap(p.cfg.Budget.Limit())
	if now.Sub(r.PushedAt) < gap {
		// Not yet; the final frame, when it comes, is not held up by this.
		return false, min(gap-now.Sub(r.PushedAt), p.cfg.ScanInterval)
	}
	if !p.cfg.Budget.Take(chat, finalReserve) {
		p.count(func(s *Stats) { s.Throttled++ })
		return false, time.Until(p.cfg.Budget.Free(chat))
	}
	content := Clip(text, wecom.MaxContentBytes-200, "…")
	if !changed || text == "" {
		el := now.Sub(r.Received)
		format := p.cfg.HeartbeatLine
		if r.Exec == task.Queued && r.Attempt == 0 {
			format = p.cfg.QueuedLine // every worker slot is busy: say so
		}
		line := fmt.Sprintf(format, int(el.Minutes()), int(el.Seconds())%60)
		content = join(content, line)
	}
	err := p.cfg.Conn.ReplyStream(ctx, r.ReqID, wecom.Stream{ID: r.StreamID, Content: content})
	if err != nil {
		if refused(err) {
			p.cfg.Budget.Refund(chat)
		}
		if code := wecom.ErrCodeOf(err); refused(err) && (code == wecom.ErrCodeInvalidReqID || code == wecom.ErrCodeStreamExpired) {
			return p.toPush(ctx, r, fmt.Sprintf("stream refused (errcode %d); pushing the answer", code))
		}
		return p.sendFailed(ctx, r, err)
	}
	p.count(func(s *Stats) { s.Frames++ })
	shownNow := p.cfg.Now()
	p.mu.Lock()
	if en := p.active[r.ID]; en != nil {
		en.shownAt = shownNow
	}
	p.mu.Unlock()
	if changed {
		p.lag(r.ID, shownNow)
	}
	hash := ""
	if changed {
		hash = task.Hash(text)
	}
	if _, err := p.cfg.Lifecycle.ShownFrom(ctx, r, rev, hash, shownNow); err != nil {
		p.log.Warn().Err(err).Str("task", r.ID).Msg("record not updated after a frame")
	}
	return false, p.cfg.ScanInterval
}

// closeStream ends the stream with the content so far and a note; the full
// answer follows by push.
func (p *Pusher) closeStream(ctx context.Context, r *task.Record, text string, why string) (bool, time.Duration) {
	note := p.cfg.TruncatedNote
	content := join(Clip(text, wecom.MaxContentBytes-len(note)-8, "…"), note)
	if !p.cfg.Budget.Take(r.Chat, 0) {
		p.count(func(s *Stats) { s.Throttled++ })
		return false, time.Until(p.cfg.Budget.Free(r.Chat))
	}
	err := p.cfg.Conn.ReplyStream(ctx, r.ReqID, wecom.Stream{ID: r.StreamID, Content: content, Finish: true})
	if err == nil {
		p.count(func(s *Stats) { s.Frames++; s.Truncated++ })
	} else {
		p.cfg.Budget.Refund(r.Chat)
		p.log.Info().Err(err).Str("task", r.ID).Msg("closing the stream failed; the answer goes by push anyway")
	}
	return p.toPush(ctx, r, why)
}

// toPush marks the delivery truncated: the complete answer is owed by push.
func (p *Pusher) toPush(ctx context.Context, r *task.Record, why string) (bool, time.Duration) {
	if _, err := p.cfg.Lifecycle.Truncate(ctx, r.ID, why); err != nil {
		return false, time.Second
	}
	return false, 0
}

// push delivers the complete answer by aibot_send_msg once it is done.
func (p *Pusher) push(ctx context.Context, r *task.Record, text string, now time.Time) (bool, time.Duration) {
	if r.Delivery == task.Pending || r.Delivery == task.Streaming {
		// Began under another term, or never got a stream: owed by push.
		return p.toPush(ctx, r, fmt.Sprintf("stream began under term %d, this is term %d", r.Term, p.cfg.Term))
	}
	if !r.Exec.Finished() {
		return false, p.cfg.ScanInterval
	}
	if done := r.ExecDone(); !done.IsZero() && now.Sub(done) > p.cfg.ReplayExpiry && r.PushedParts == 0 {
		rec, err := p.cfg.Lifecycle.Expired(ctx, r.ID, now.Sub(done))
		if err != nil {
			return false, time.Second
		}
		p.count(func(s *Stats) { s.Failed++ })
		p.log.Error().Str("task", r.ID).Dur("owed_for", now.Sub(done)).Msg("answer owed past the replay expiry: not sent late; delivery failed")
		if p.cfg.FailedForGood != nil && rec.Delivery == task.DeliveryFailed {
			p.cfg.FailedForGood(rec, errors.New(rec.DeliveryReason))
		}
		return true, 0
	}
	final := p.finalText(r, text)
	if text == "" && (r.Exec == task.Failed || r.Exec == task.Canceled) {
		// A proactive message neither replies to the question nor, with
		// no answer in it, says which question it is about: quote it.
		final = join(quote(r.Question), final)
	}
	parts := Split(final, wecom.MaxContentBytes)
	chatType := wecom.ChatTypeSingle
	if r.ChatType == wecom.ChatGroup {
		chatType = wecom.ChatTypeGroup
	}
	for i := r.PushedParts; i < len(parts); i++ {
		if p.cfg.Gate != nil {
			if wait := p.cfg.Gate(now); wait > 0 {
				p.count(func(s *Stats) { s.Held++ })
				return false, wait
			}
		}
		if !p.cfg.Budget.Take(r.Chat, 0) {
			p.count(func(s *Stats) { s.Throttled++ })
			return false, time.Until(p.cfg.Budget.Free(r.Chat))
		}
		if err := p.cfg.Conn.SendMarkdown(ctx, r.Chat, chatType, parts[i]); err != nil {
			if refused(err) {
				p.cfg.Budget.Refund(r.Chat) // refused: not counted by WeCom either
			}
			return p.sendFailed(ctx, r, err)
		}
		p.count(func(s *Stats) { s.Pushes++ })
		n := i + 1
		rec, err := p.cfg.Lifecycle.PartPushed(ctx, r.ID, n)
		if err != nil {
			p.log.Warn().Err(err).Str("task", r.ID).Int("part", n).Msg("pushed part not recorded; a new leader may push it again")
			return false, time.Second
		}
		r = rec
	}
	return p.delivered(ctx, r, final, fmt.Sprintf("%d part(s) pushed", len(parts)), len(parts))
}

func (p *Pusher) delivered(ctx context.Context, r *task.Record, text, why string, parts int) (bool, time.Duration) {
	if _, err := p.cfg.Lifecycle.Delivered(ctx, r.ID, text, why, parts); err != nil {
		p.log.Warn().Err(err).Str("task", r.ID).Msg("delivery not recorded; a new leader may deliver again")
		return false, time.Second
	}
	p.count(func(s *Stats) { s.Delivered++ })
	return true, 0
}

// refused reports whether WeCom answered a send with an errcode (it did
// not apply it, and does not count it against the quota), as opposed to an
// outcome that is unknown (no ack, the connection gone).
func refused(err error) bool {
	var ae *wecom.AckError
	return errors.As(err, &ae) && !errors.Is(err, wecom.ErrAckUnknown)
}

// sendFailed counts an attempt about the task itself; past MaxAttempts the
// delivery fails. A connection-wide error (closed, ack timeouts, not
// subscribed, system busy) is not the task's: it costs no attempt, and the
// send is tried again on a healthy connection (the client tears a sick one
// down; the election loop makes a new one).
func (p *Pusher) sendFailed(ctx context.Context, r *task.Record, sendErr error) (bool, time.Duration) {
	p.count(func(s *Stats) { s.Errors++ })
	if wecom.IsConnectionError(sendErr) || ctx.Err() != nil {
		p.log.Info().Err(sendErr).Str("task", r.ID).Msg("send failed on the connection, not the task; retrying without counting an attempt")
		return false, time.Second
	}
	var attempts int
	rec, err := p.cfg.Lifecycle.SendFailed(ctx, r.ID, sendErr, p.cfg.MaxAttempts)
	if rec != nil {
		attempts = rec.PushAttempts
	}
	if err == nil && rec.Delivery == task.DeliveryFailed {
		p.count(func(s *Stats) { s.Failed++ })
		p.log.Error().Err(sendErr).Str("task", r.ID).Msg("delivery failed for good")
		if p.cfg.FailedForGood != nil {
			p.cfg.FailedForGood(rec, sendErr)
		}
		return true, 0
	}
	backoff := min(time.Second<<min(attempts, 6), time.Minute)
	p.log.Warn().Err(sendErr).Str("task", r.ID).Int("attempt", attempts).Dur("retry_in", backoff).Msg("send failed; will retry")
	return false, backoff
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
