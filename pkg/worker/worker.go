// Package worker is a node's compute side: it pulls tasks from the
// JetStream work queue with bounded slots, runs them on an AI backend, and
// writes the accumulated answer to the output bucket, coalesced. Every
// step of a task goes through the task lifecycle (package task), which
// owns the record.
//
// A task's queue message is acked only when the task is finished
// (succeeded, canceled, or failed for good); the ack frees the
// conversation. While a task runs the message is kept alive with
// in-progress acks; a worker that dies mid-task stops sending them, the
// message is redelivered after the ack wait and another worker retries
// under the next attempt number. Attempts are fenced: an attempt that
// was taken over stops at its next write and leaves the message to the
// newer one. A task that fails on its last delivery, that is interrupted
// there by a shutdown, or that passes the execution Deadline, is failed
// for good with the reason and its message terminated: no conversation
// is left locked by a message nobody will run.
package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/limits"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

// Config configures a worker. Zero values take the defaults named.
type Config struct {
	NodeID string
	// Slots is how many queue tasks this worker holds at once, running or
	// waiting for an AI concurrency token. An AI task is I/O-bound (it
	// waits on a model's stream), so slots are sized by memory, not CPU:
	// a running task holds about 44 KB of heap and stacks (goroutines,
	// coalescer, prompt, output writes; measured with the demo backend by
	// BenchmarkRunningTaskMemory, NATS's share included), up to twice
	// that in RSS under Go's default GOGC. Default DefaultSlots (1024):
	// about 45 MB in use, 90 MB RSS, per node when full. Raising it
	// costs memory only; lowering it makes tasks queue (the user sees
	// push.queued_line) while the model could take more. The sum over
	// all nodes must stay below the queue's TaskMaxRunning (65536).
	Slots int
	// LeaderSlots is how many slots to use while Leadership says this
	// node leads a bot (at most Slots): the access node keeps headroom
	// for its connection and pusher. 0: none, the leader runs no task
	// (off the queue or locally: ErrNoSlot). LeaderSlotsAll: Slots.
	// Serve passes worker.leader_slots (default DefaultLeaderSlots).
	LeaderSlots int
	// Leadership tells whether LeaderSlots apply. Default nil: they never
	// do, the worker uses Slots (LeaderSlots is then ignored).
	Leadership Leadership
	// AIConcurrency bounds how many tasks call the AI backend at once on
	// this node (what the model provider allows, divided among nodes).
	// A task waiting for a token is not started: its record stays queued
	// (the pusher shows push.queued_line) and its queue message is kept
	// alive with in-progress acks; the worker fetches no more tasks than
	// it has tokens free, so tasks it cannot run stay in the queue for
	// other nodes. Default 0: no limit beyond Slots.
	AIConcurrency int
	// Backend answers every bot's tasks, unless Bots is set.
	Backend ai.Backend
	// Bots, if set, gives each task its bot's backend, memory and answer
	// cap (the bot's settings, which change at run time); Backend,
	// ContextTurns, ContextBytes and MaxAnswerBytes are then not used.
	Bots  Bots
	Store *jetstream.Store
	// SystemPrompt is prepended to every request, if set.
	SystemPrompt string
	// OutputInterval is the least time between two output writes of one
	// task. Default 1s. The pusher shows a stream's progress at most every
	// few seconds (the per-conversation budget), so writing more often
	// only loads the output bucket and its watchers with versions nobody
	// sees. Lower it for snappier progress on few conversations.
	OutputInterval time.Duration
	// ContextTurns and ContextBytes bound the conversation context kept
	// for multi-turn answers. Defaults 20 turns and 16 KiB.
	ContextTurns, ContextBytes int
	// MaxAnswerBytes caps an answer: once its text would take more bytes
	// than this in the output bucket (task.OutputTextBytes: its UTF-8
	// length, more for what JSON escapes), the backend is stopped, the
	// text cut there and TruncatedNote appended, and that is the answer,
	// stored and delivered once. Without a cap an answer longer than the
	// bucket's largest value (NATS's max_payload, 1 MiB by default) was
	// never stored, and its task ran again on every delivery. Default
	// DefaultMaxAnswerBytes (512 KiB, about 26 WeCom messages pushed);
	// at most config.MaxAnswerBytesLimit.
	MaxAnswerBytes int
	// TruncatedNote ends an answer cut at MaxAnswerBytes. Default
	// DefaultTruncatedNote.
	TruncatedNote string
	// RetryDelay is how long a failed attempt waits before redelivery.
	// Default 2s.
	RetryDelay time.Duration
	// Deadline bounds a task's execution, counted from its first attempt:
	// past it the task is failed, its conversation freed and the user
	// told, however many attempts remain. A few times the AI backend's
	// timeout (a slow answer may be retried once or twice). Default 30m.
	Deadline time.Duration
	// StorePatience is how long a finished answer's last write and the
	// record's "succeeded" are retried while JetStream does not confirm
	// them (a NATS server failing over takes seconds; a fallback tier
	// runs exactly while JetStream is in trouble). The answer is in hand:
	// failing it for a blip would cost the user a whole new attempt, or,
	// off the queue, the answer. Default 1m.
	StorePatience time.Duration
	// MediaDir is where a task's files are copied for its run, one
	// directory per task, removed after it ("": os.TempDir()).
	MediaDir string
	// Lifecycle records every step of a task (a *task.Lifecycle).
	// Default: one on Store.
	Lifecycle Lifecycle
	// Metrics hears of the worker's failed JetStream requests. Default
	// nil: nobody counts them.
	Metrics Metrics
	// Skew, if set, says when this node's clock is too far off to be
	// trusted (pkg/skew): the worker then fetches no task from the queue
	// (other nodes run them; the times it would write are compared with
	// theirs).
	Skew   Skew
	Logger zerolog.Logger
	// Now is the clock of the default Lifecycle's records (a test seam).
	// Default time.Now.
	Now func() time.Time
	// Clock is what the worker's polls, keep-alives, cancel checks and
	// output writes wait on. Default clock.Real.
	Clock clock.Clock
}

// Bots gives each task what its bot runs it with. Run is asked once, as a
// task starts: a task keeps what it started with when its bot's settings
// change. It must be quick and must not block.
type Bots interface {
	Run(bot string) BotRun
}

// BotRun is what a bot's task runs with.
type BotRun struct {
	Backend ai.Backend
	// Memory bounds the conversation context read before the answer and
	// written after it (Turns 0: none).
	Memory task.Memory
	// MaxAnswerBytes caps the answer (Config.MaxAnswerBytes): 0 is
	// DefaultMaxAnswerBytes.
	MaxAnswerBytes int
	// Limits are the bot's limits: with a token limit, the tokens its
	// backend reports are counted (model.go).
	Limits limits.Limits
}

// fixedBots is Config's backend and bounds for every bot (Config.Bots nil).
type fixedBots struct{ run BotRun }

func (f fixedBots) Run(string) BotRun { return f.run }

// Skew says whether this node's clock is off (pkg/skew's Watch).
type Skew interface {
	Off() (why string, off bool)
}

// Leadership answers whether this node leads any bot now, so that the
// worker's LeaderSlots apply. It is asked before each fetch of tasks and,
// under the worker's lock, for each task started off the queue: it must
// be quick, must not block and must not call the worker.
type Leadership interface {
	LeadsAny() bool
}

// Metrics counts the worker's failed JetStream requests (the node's NATS
// error counter).
type Metrics interface {
	// NATSError is called with the operation each time a JetStream
	// request of the worker fails while it runs: its own queue requests
	// ("fetch" of tasks, "ack" confirmed of a finished task, "remove",
	// the removal that replaces an ack never confirmed, "hold", the
	// re-read of a task held off the queue), and a running task's reads
	// and writes of the store ("output_write", "record_write",
	// "record_read", "context_read", "context_write"), those only when
	// JetStream failed (task.StoreFailed), not when the lifecycle said no
	// (superseded, finished) or the task's run ended the request. It must
	// not block.
	NATSError(op string)
}

// Defaults of Config's slots: worker.slots' and worker.leader_slots'
// (pkg/config says why these numbers).
const (
	DefaultSlots       = config.DefaultWorkerSlots
	DefaultLeaderSlots = config.DefaultLeaderSlots
	// LeaderSlotsAll as Config.LeaderSlots: as many as Slots while leading.
	LeaderSlotsAll = config.LeaderSlotsAll
)

// Defaults of the answer cap (Config.MaxAnswerBytes, TruncatedNote).
const (
	DefaultMaxAnswerBytes = config.DefaultMaxAnswerBytes
	DefaultTruncatedNote  = "（回答过长，已超出长度上限，后面的内容已省略。）"
)

// DefaultDeadline is Config.Deadline's default: three times the AI
// backends' default timeout of 10 minutes.
const DefaultDeadline = 30 * time.Minute

func (c *Config) setDefaults() {
	if c.Slots <= 0 {
		c.Slots = DefaultSlots
	}
	if c.OutputInterval <= 0 {
		c.OutputInterval = time.Second
	}
	if c.StorePatience <= 0 {
		c.StorePatience = time.Minute
	}
	if c.ContextTurns <= 0 {
		c.ContextTurns = 20
	}
	if c.ContextBytes <= 0 {
		c.ContextBytes = 16 << 10
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = 2 * time.Second
	}
	if c.MaxAnswerBytes <= 0 {
		c.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	if c.TruncatedNote == "" {
		c.TruncatedNote = DefaultTruncatedNote
	}
	if c.Deadline <= 0 {
		c.Deadline = DefaultDeadline
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Worker pulls and runs tasks.
type Worker struct {
	cfg     Config
	log     zerolog.Logger
	buckets Buckets // Config.Store: what an attempt reads and writes beside its record

	mu      sync.Mutex
	running map[string]context.CancelCauseFunc // task id → cancel of its run
	outputs map[string]*coalescer              // task id → its run's output, for flush requests
	held    int                                // slots in use: queue tasks fetched plus tasks started off the queue
	holding int                                // queue copies held while their task runs off the queue

	// tokens holds one value per task calling the AI backend (nil: no
	// limit); waiting counts queue tasks fetched and waiting for one, so
	// Run does not fetch tasks it could not start; tokenFreed wakes Run
	// when a token is given back.
	tokens     chan struct{}
	waiting    int // queue tasks waiting for a token
	waitingAll int // every task waiting for a token, fallback tiers too
	tokenFreed chan struct{}
}

// New validates cfg.
func New(cfg Config) (*Worker, error) {
	cfg.setDefaults()
	switch {
	case cfg.NodeID == "":
		return nil, errors.New("worker: NodeID is required")
	case cfg.Backend == nil && cfg.Bots == nil:
		return nil, errors.New("worker: Backend or Bots is required (--ai demo|exec|openai)")
	case cfg.Store == nil:
		return nil, errors.New("worker: Store is required")
	case cfg.LeaderSlots < 0 && cfg.LeaderSlots != LeaderSlotsAll:
		return nil, fmt.Errorf("worker: LeaderSlots %d: must be 0 (the leader runs no task) or more, or LeaderSlotsAll", cfg.LeaderSlots)
	case cfg.AIConcurrency < 0:
		return nil, fmt.Errorf("worker: AIConcurrency %d: must be 0 (no limit) or more", cfg.AIConcurrency)
	case cfg.MaxAnswerBytes > config.MaxAnswerBytesLimit:
		return nil, fmt.Errorf("worker: MaxAnswerBytes %d: at most %d, or answers would not fit the output bucket", cfg.MaxAnswerBytes, config.MaxAnswerBytesLimit)
	}
	if cfg.Lifecycle == nil {
		cfg.Lifecycle = task.NewLifecycle(cfg.Store, cfg.NodeID, cfg.Logger).WithClock(cfg.Now)
	}
	if cfg.Bots == nil {
		cfg.Bots = fixedBots{BotRun{Backend: cfg.Backend, MaxAnswerBytes: cfg.MaxAnswerBytes,
			Memory: task.Memory{Turns: cfg.ContextTurns, Bytes: cfg.ContextBytes}}}
	}
	w := &Worker{cfg: cfg, buckets: cfg.Store, running: map[string]context.CancelCauseFunc{},
		outputs: map[string]*coalescer{}, tokenFreed: make(chan struct{}, 1),
		log: cfg.Logger.With().Str("node", cfg.NodeID).Str("component", "worker").Logger()}
	if cfg.AIConcurrency > 0 {
		w.tokens = make(chan struct{}, cfg.AIConcurrency)
	}
	return w, nil
}

// Busy is how many tasks this worker is running now.
func (w *Worker) Busy() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

// Holding is how many queue copies of tasks running off the queue this
// worker holds now (see hold).
func (w *Worker) Holding() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.holding
}

// InAI is how many tasks hold an AI concurrency token now (0 without a
// limit).
func (w *Worker) InAI() int {
	if w.tokens == nil {
		return 0
	}
	return len(w.tokens)
}

// Waiting is how many tasks wait for an AI concurrency token now: taken
// from the queue (or given by a fallback tier) but not started.
func (w *Worker) Waiting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waitingAll
}

// natsError tells Config.Metrics that a request op failed.
func (w *Worker) natsError(op string) {
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.NATSError(op)
	}
}

// storeError tells Config.Metrics about err, from op on the store, if it
// is JetStream failing (task.StoreFailed).
func (w *Worker) storeError(op string, err error) {
	if task.StoreFailed(err) {
		w.natsError(op)
	}
}

// clock is what the worker waits on (Config.Clock).
func (w *Worker) clock() clock.Clock { return clock.Or(w.cfg.Clock) }
