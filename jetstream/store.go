package jetstream

import (
	"context"
	"errors"
	"fmt"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Defaults of Options.
const (
	DefaultPrefix          = "BOTCTL"
	DefaultReplicas        = 1
	DefaultDuplicateWindow = 10 * time.Minute
	DefaultTaskAckWait     = 30 * time.Second
	DefaultTaskMaxRunning  = 65536
	DefaultTaskMaxDeliver  = 5
	DefaultRecordTTL       = 7 * 24 * time.Hour
	DefaultContextHistory  = 1
	DefaultContextTTL      = 24 * time.Hour
	// ProgressTTL is how long the progress bucket keeps a task's text
	// after its last write: far longer than a backend streaming an answer
	// goes quiet, so a live answer's entry never expires, and short
	// enough that what a crashed worker left there does not stay in the
	// servers' memory. A finished attempt deletes its entry (the answer
	// is in the output bucket), so this bounds only what is left behind.
	ProgressTTL = 15 * time.Minute
	// WorkersConsumer is the durable pull consumer every worker pulls from.
	WorkersConsumer = "workers"
)

// Options shape what Declare creates. The zero value is the default of
// every field; a field left zero takes its default.
type Options struct {
	// Prefix names everything: the stream <Prefix>_TASKS, the buckets and
	// the object store <Prefix>_<NAME> (NamesFor lists them all) and the
	// subjects <prefix>.tasks.> and the like (lower case). Letters, digits, '_'
	// and '-'. Two deployments sharing one NATS account need two prefixes.
	// Default "BOTCTL".
	Prefix string

	// Replicas of the stream, its consumer and every bucket: 1 for the
	// embedded server, 3 (or 5) on a NATS cluster. Declare creates with
	// it and never changes a deployed one (see Mismatch): an operator
	// scales a deployment with the nats CLI. Default 1.
	Replicas int

	// DuplicateWindow is how long the task stream remembers a msgid: a task
	// published again within it (WeCom resending a callback, a spool drained
	// after a publish whose ack was lost) is acknowledged as a duplicate and
	// not queued twice. Longer costs server memory per message; shorter
	// risks a second run of a task whose first publish outlived the window
	// (an outage spooled for longer than this). Default 10m.
	DuplicateWindow time.Duration

	// TaskAckWait is how long a worker may hold a task without acking or
	// sending an in-progress ack before it is redelivered to another worker.
	// Shorter recovers faster from a dead worker but needs more frequent
	// in-progress acks. Default 30s.
	TaskAckWait time.Duration

	// TaskMaxDeliver is how many times a task is delivered before the
	// server stops delivering it. Such a task stays in the queue and keeps
	// its conversation busy until someone calls GiveUp or
	// ReleaseConversation. Default 5.
	TaskMaxDeliver int

	// TaskMaxRunning caps how many tasks may be delivered and not yet
	// acked at once across the whole cluster (the consumer's
	// MaxAckPending): every running task holds one. It must exceed the sum
	// of all nodes' worker slots, or slots sit idle while tasks wait; the
	// server's own default (1,000) silently capped a 5,000-conversation
	// load. Default 65536.
	TaskMaxRunning int

	// RecordTTL bounds how long a task record and its output are kept after
	// their last write, so the buckets do not grow without end. It must be
	// far longer than any task and any delivery retry: a record that expires
	// before it is delivered is lost to the pusher. Default 7 days.
	RecordTTL time.Duration

	// ContextHistory is how many revisions of a conversation's context the
	// context bucket keeps (1 to 64). Above 1 an operator can read earlier
	// turns with `nats kv history`; the pusher and workers read only the
	// latest. Default 1.
	ContextHistory int

	// ContextTTL forgets a conversation's context after this long without a
	// new turn; together with ContextMaxBytes it bounds the context bucket.
	// Default 24h.
	ContextTTL time.Duration

	// ContextMaxBytes bounds the whole context bucket; when full the oldest
	// contexts are dropped first. Zero is unlimited.
	ContextMaxBytes int64

	// MediaTTL is how long the media bucket keeps the bytes of a file a
	// user sent (media.go): longer than a task waits and runs, retries
	// included. Default DefaultMediaTTL (24h).
	MediaTTL time.Duration

	// MediaMaxBytes bounds the media bucket (its stream's MaxBytes, with
	// DiscardNew): a file that would pass it is refused (MediaFull) and
	// nothing of it is kept, while every other stream goes on. JetStream
	// reserves it on each server. Default DefaultMediaMaxBytes (4 GiB);
	// the media bucket is never unbounded: Declare keeps a deployed
	// bound, but bounds a store deployed without one (keepMedia).
	MediaMaxBytes int64

	// ReserveBytes is JetStream storage kept from the media store for the
	// task queue and the buckets: declared as the MaxBytes of an empty
	// stream (ReserveStream) before the media store, so that a server
	// whose storage cannot hold MediaMaxBytes beside it refuses the media
	// store at start (reserve.go). Zero: no reservation is created (one
	// deployed is kept).
	ReserveBytes int64

	// Logger records given-up tasks, released conversations and, as
	// warnings, the deployed settings Declare kept over these options.
	// The zero value logs nothing.
	Logger zerolog.Logger
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// withDefaults fills zero fields and rejects values the server would refuse
// or that break the design, naming the field.
func (o Options) withDefaults() (Options, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if !prefixRE.MatchString(o.Prefix) {
		return o, fmt.Errorf("jetstream options: Prefix %q: use letters, digits, '_' and '-' only", o.Prefix)
	}
	if o.Replicas == 0 {
		o.Replicas = DefaultReplicas
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		return o, fmt.Errorf("jetstream options: Replicas %d: must be 1 to 5", o.Replicas)
	}
	if o.DuplicateWindow == 0 {
		o.DuplicateWindow = DefaultDuplicateWindow
	}
	if o.DuplicateWindow < 100*time.Millisecond {
		return o, fmt.Errorf("jetstream options: DuplicateWindow %s: must be at least 100ms", o.DuplicateWindow)
	}
	if o.TaskAckWait == 0 {
		o.TaskAckWait = DefaultTaskAckWait
	}
	if o.TaskAckWait < 0 {
		return o, fmt.Errorf("jetstream options: TaskAckWait %s: must be positive", o.TaskAckWait)
	}
	if o.TaskMaxDeliver == 0 {
		o.TaskMaxDeliver = DefaultTaskMaxDeliver
	}
	if o.TaskMaxDeliver < 1 {
		return o, fmt.Errorf("jetstream options: TaskMaxDeliver %d: must be at least 1", o.TaskMaxDeliver)
	}
	if o.TaskMaxRunning == 0 {
		o.TaskMaxRunning = DefaultTaskMaxRunning
	}
	if o.TaskMaxRunning < 1 {
		return o, fmt.Errorf("jetstream options: TaskMaxRunning %d: must be at least 1", o.TaskMaxRunning)
	}
	if o.RecordTTL == 0 {
		o.RecordTTL = DefaultRecordTTL
	}
	if o.RecordTTL < 0 {
		return o, fmt.Errorf("jetstream options: RecordTTL %s: must be positive", o.RecordTTL)
	}
	if o.ContextHistory == 0 {
		o.ContextHistory = DefaultContextHistory
	}
	if o.ContextHistory < 1 || o.ContextHistory > 64 {
		return o, fmt.Errorf("jetstream options: ContextHistory %d: must be 1 to 64", o.ContextHistory)
	}
	if o.ContextTTL == 0 {
		o.ContextTTL = DefaultContextTTL
	}
	if o.ContextTTL < 0 {
		return o, fmt.Errorf("jetstream options: ContextTTL %s: must be positive", o.ContextTTL)
	}
	if o.MediaTTL == 0 {
		o.MediaTTL = DefaultMediaTTL
	}
	if o.MediaTTL < time.Minute {
		return o, fmt.Errorf("jetstream options: MediaTTL %s: must be at least 1m (a task's files must outlive its run)", o.MediaTTL)
	}
	if o.MediaMaxBytes == 0 {
		o.MediaMaxBytes = DefaultMediaMaxBytes
	}
	if o.MediaMaxBytes < 0 {
		return o, fmt.Errorf("jetstream options: MediaMaxBytes %d: must be positive (the media bucket is always bounded)", o.MediaMaxBytes)
	}
	if o.ReserveBytes < 0 {
		return o, fmt.Errorf("jetstream options: ReserveBytes %d: must be zero (no reservation) or positive", o.ReserveBytes)
	}
	if o.ContextMaxBytes < 0 {
		return o, fmt.Errorf("jetstream options: ContextMaxBytes %d: must be zero (unlimited) or positive", o.ContextMaxBytes)
	}
	return o, nil
}

// Names are the names of everything Declare creates for one prefix, for
// tools and operators (`nats stream info <TaskStream>`).
type Names struct {
	TaskStream        string // work-queue stream of tasks, e.g. BOTCTL_TASKS
	TaskSubjectPrefix string // e.g. botctl.tasks; subjects are <this>.<bot>.<conversation>
	// Core NATS announcements (no storage), under the same prefix so that
	// environments sharing an account never hear each other's.
	NoticeSubjectPrefix string // e.g. botctl.notice; subjects are <this>.<bot>
	CancelSubjectPrefix string // e.g. botctl.cancel; subjects are <this>.<task id>
	FlushSubjectPrefix  string // e.g. botctl.flush; subjects are <this>.<node id>, payload a task id: write its text now
	Consumer            string // durable pull consumer on TaskStream: "workers"
	TasksBucket         string // KV of task records, e.g. BOTCTL_TASKS (stream KV_BOTCTL_TASKS)
	OutputBucket        string // KV of per-task output (an attempt's last write: the answer), e.g. BOTCTL_OUTPUT
	ProgressBucket      string // KV of answers in progress (memory storage), e.g. BOTCTL_PROGRESS
	ContextBucket       string // KV of conversation context, e.g. BOTCTL_CONTEXT
	WatermarksBucket    string // KV of per-bot watermarks, e.g. BOTCTL_WATERMARKS
	PendingBucket       string // KV index of tasks not yet delivered, e.g. BOTCTL_PENDING
	SeenBucket          string // KV of messages handled without a task (busy, commands), e.g. BOTCTL_SEEN
	HealthBucket        string // KV of per-bot health records and silence baselines, e.g. BOTCTL_HEALTH
	IncidentsBucket     string // KV of incidents (T1/T2/T3, alerts sent), e.g. BOTCTL_INCIDENTS
	MediaBucket         string // object store of files users sent, e.g. BOTCTL_MEDIA (stream OBJ_BOTCTL_MEDIA)
	LimitsBucket        string // KV of the bots' use counters (pkg/limits), e.g. BOTCTL_LIMITS
	ReserveStream       string // empty stream whose MaxBytes reserves storage for all but media (reserve.go), e.g. BOTCTL_RESERVE
}

// NamesFor returns the names for prefix ("" is DefaultPrefix). It does not
// validate prefix; Declare does.
func NamesFor(prefix string) Names {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Names{
		TaskStream:          prefix + "_TASKS",
		TaskSubjectPrefix:   strings.ToLower(prefix) + ".tasks",
		NoticeSubjectPrefix: strings.ToLower(prefix) + ".notice",
		CancelSubjectPrefix: strings.ToLower(prefix) + ".cancel",
		FlushSubjectPrefix:  strings.ToLower(prefix) + ".flush",
		Consumer:            WorkersConsumer,
		TasksBucket:         prefix + "_TASKS",
		OutputBucket:        prefix + "_OUTPUT",
		ProgressBucket:      prefix + "_PROGRESS",
		ContextBucket:       prefix + "_CONTEXT",
		WatermarksBucket:    prefix + "_WATERMARKS",
		PendingBucket:       prefix + "_PENDING",
		SeenBucket:          prefix + "_SEEN",
		HealthBucket:        prefix + "_HEALTH",
		IncidentsBucket:     prefix + "_INCIDENTS",
		MediaBucket:         prefix + "_MEDIA",
		LimitsBucket:        prefix + "_LIMITS",
		ReserveStream:       prefix + "_RESERVE",
	}
}

// Store is botctl's data plane in JetStream, as declared by Declare. It is
// safe for concurrent use.
type Store struct {
	js      natsjs.JetStream
	opts    Options
	names   Names
	stream  natsjs.Stream
	workers natsjs.Consumer

	tasks, output, progress, context, watermarks, undelivered, seen, health, incidents, limits natsjs.KeyValue
	media                                                                                      natsjs.ObjectStore
	mediaStream                                                                                natsjs.Stream // media's stream, for DeleteMedia's purges

	mismatches []Mismatch // deployed settings kept over opts (see Mismatch)

	link *link // follows the connection's reconnects (link.go)
}

// declareStream creates the stream, or updates it only if its config
// differs in a field botctl sets. Nodes that start together must not race
// needless updates against consumer creation: nats-server 2.15.2's file
// store updates its config without the lock that consumer creation reads
// it under (the race detector catches it), so a config that is already
// right is left alone, and a lost creation race is not followed by an
// update.
//
// On a stream that exists, the deployed replicas and limits are kept and
// each difference is added to found (keepStream).
func declareStream(ctx context.Context, js natsjs.JetStream, cfg natsjs.StreamConfig, found *[]Mismatch) (natsjs.Stream, error) {
	st, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		st, err = js.CreateStream(ctx, cfg)
		if err == nil || !errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) {
			return st, err
		}
		st, err = js.Stream(ctx, cfg.Name) // another node created it first
	}
	if err != nil {
		return nil, err
	}
	have := st.CachedInfo().Config
	*found = append(*found, keepStream(have, &cfg, replicasKey)...)
	if have.Description == cfg.Description && slices.Equal(have.Subjects, cfg.Subjects) &&
		have.Retention == cfg.Retention && have.Storage == cfg.Storage && have.Replicas == cfg.Replicas &&
		have.MaxMsgsPerSubject == cfg.MaxMsgsPerSubject && have.Discard == cfg.Discard &&
		have.DiscardNewPerSubject == cfg.DiscardNewPerSubject && have.Duplicates == cfg.Duplicates {
		return st, nil
	}
	return js.UpdateStream(ctx, cfg)
}

// declareConsumer is declareStream for the workers consumer: created if
// missing, updated only if a field botctl sets differs, so that nodes
// starting together do not send needless updates. (The 10126 "consumer
// config replica count exceeds parent stream" that the chaos harness saw
// on node restarts was not a needless update: a CLI command had scaled
// the consumer down to R1, fixed in cmd/botctl; the node's update back to
// R3 came while the stream was still scaling up.)
func declareConsumer(ctx context.Context, st natsjs.Stream, cfg natsjs.ConsumerConfig, found *[]Mismatch) (natsjs.Consumer, error) {
	c, err := st.Consumer(ctx, cfg.Durable)
	if err != nil && !errors.Is(err, natsjs.ErrConsumerNotFound) {
		return nil, err
	}
	if err == nil {
		have := c.CachedInfo().Config
		*found = append(*found, keepConsumer(st.CachedInfo().Config.Name, have, &cfg)...)
		if have.Description == cfg.Description && have.DeliverPolicy == cfg.DeliverPolicy && have.AckPolicy == cfg.AckPolicy &&
			have.AckWait == cfg.AckWait && have.MaxDeliver == cfg.MaxDeliver && have.MaxAckPending == cfg.MaxAckPending &&
			have.Replicas == cfg.Replicas {
			return c, nil
		}
	}
	return st.CreateOrUpdateConsumer(ctx, cfg)
}

// declareBucket is declareStream for a KV bucket: created if missing,
// updated only if a field botctl sets differs, its deployed replicas and
// limits kept (keepBucket). Unless direct, a replicated bucket is read
// from its stream leader only (see leaderReads).
func declareBucket(ctx context.Context, js natsjs.JetStream, cfg natsjs.KeyValueConfig, direct bool, found *[]Mismatch) (natsjs.KeyValue, error) {
	kv, err := declareBucketConfig(ctx, js, cfg, found)
	if err != nil || direct {
		return kv, err
	}
	return leaderReads(ctx, js, cfg.Bucket, kv)
}

// leaderReads turns direct gets off for bucket's stream. nats.go creates
// every bucket with AllowDirect, and a direct get is answered by any
// replica: one that is behind (it just restarted and is catching up, or
// has not applied the last write yet) answers with what it has, so a
// record read right after its create can be "not found", and a CAS
// update starts from a stale revision (a record created, then updated,
// loses the update to "key not found"). Without direct gets, reads go to the
// stream leader, which has every acknowledged write. The progress bucket
// keeps them: it is the hot path (read when the watch's copy is not
// fresh), and a text in progress a moment old is as good. The output
// bucket does not since it holds only each attempt's last write: the
// pusher reads it once per answer, right after the worker's Finish, and
// a direct get answered by a replica that had not applied that write yet
// would find the answer missing and wait (answerWait) to read it again.
// (The ramp's second output read per answer, first taken for that, was
// a running task's step reading before its first version: pkg/pusher's
// unwritten.) An R1 bucket has one replica: nothing to change.
func leaderReads(ctx context.Context, js natsjs.JetStream, bucket string, kv natsjs.KeyValue) (natsjs.KeyValue, error) {
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	c := st.CachedInfo().Config
	if !c.AllowDirect || c.Replicas <= 1 {
		return kv, nil
	}
	c.AllowDirect = false
	if _, err := js.UpdateStream(ctx, c); err != nil {
		return nil, fmt.Errorf("turn direct gets off: %w", err)
	}
	return js.KeyValue(ctx, bucket) // a handle caches the stream's config
}

func declareBucketConfig(ctx context.Context, js natsjs.JetStream, cfg natsjs.KeyValueConfig, found *[]Mismatch) (natsjs.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if err == nil || !errors.Is(err, natsjs.ErrBucketExists) {
			return kv, err
		}
		kv, err = js.KeyValue(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, err
	}
	if bs, ok := st.(*natsjs.KeyValueBucketStatus); ok {
		have := bs.StreamInfo().Config
		*found = append(*found, keepBucket(have, &cfg)...)
		if have.Description == cfg.Description && have.MaxMsgsPerSubject == int64(cfg.History) &&
			have.MaxAge == cfg.TTL && have.MaxBytes == cfg.MaxBytes && have.Storage == cfg.Storage &&
			have.Replicas == cfg.Replicas {
			return kv, nil
		}
	}
	return js.UpdateKeyValue(ctx, cfg)
}

// Declare creates what is missing of the task stream, its workers
// consumer, the buckets and the object store, with opts, and returns a
// Store bound to them. It is idempotent: on a deployment already declared
// with the same opts (a second call, a restart, another node starting) it
// changes nothing. Stored tasks, records and consumer state are kept
// across calls.
//
// On what exists it keeps the deployed replicas and limits, whatever opts
// asks (see Mismatch): it logs each difference as a warning naming the
// configuration key, Store.Mismatches returns them, and Store.Options
// holds the deployed values of the task stream, its consumer, the media
// store and the reservation. It updates only what no option sets (a
// description, the subjects), and one limit: a media store deployed
// without a bound takes opts.MediaMaxBytes, logged as a warning (a store
// without a bound can fill the servers' storage and stop every bot).
//
// An option the server cannot change in place (the task stream's retention,
// for one) fails with the server's error; nothing is deleted to make it fit.
func Declare(ctx context.Context, js natsjs.JetStream, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	n := NamesFor(opts.Prefix)
	s := &Store{js: js, opts: opts, names: n}

	s.stream, err = declareStream(ctx, js, s.taskStreamConfig(), &s.mismatches)
	if err != nil {
		return nil, fmt.Errorf("declare stream %s: %w", n.TaskStream, err)
	}
	s.workers, err = declareConsumer(ctx, s.stream, s.workersConfig(), &s.mismatches)
	if err != nil {
		return nil, fmt.Errorf("declare consumer %s on %s: %w", n.Consumer, n.TaskStream, err)
	}
	buckets := s.bucketSpecs()
	for _, b := range buckets {
		kv, err := declareBucket(ctx, js, b.cfg, b.direct, &s.mismatches)
		if err != nil {
			return nil, fmt.Errorf("declare bucket %s: %w", b.cfg.Bucket, err)
		}
		if b.cfg.Storage == natsjs.MemoryStorage {
			kv = &memoryKV{KeyValue: kv, js: js, cfg: b.cfg}
		}
		*b.kv = kv
	}
	if err := declareReserve(ctx, js, n, &s.opts, &s.mismatches); err != nil {
		return nil, fmt.Errorf("declare stream %s: %w", n.ReserveStream, err)
	}
	if s.media, s.mediaStream, err = declareMedia(ctx, js, n.MediaBucket, &s.opts, &s.mismatches); err != nil {
		return nil, fmt.Errorf("declare object store %s: %w", n.MediaBucket, err)
	}
	s.keepDeployed()
	// Every bucket's reads and writes end at a reconnect (link.go).
	s.link = followLink(js.Conn())
	for _, b := range buckets {
		*b.kv = linkedKV{KeyValue: *b.kv, l: s.link}
	}
	return s, nil
}

// keepDeployed sets the store's options to the deployed task stream's and
// consumer's (workers keep tasks alive within the deployed ack wait), and
// logs each mismatch.
func (s *Store) keepDeployed() {
	s.opts.Replicas = s.stream.CachedInfo().Config.Replicas
	s.opts.DuplicateWindow = s.stream.CachedInfo().Config.Duplicates
	c := s.workers.CachedInfo().Config
	s.opts.TaskAckWait, s.opts.TaskMaxDeliver, s.opts.TaskMaxRunning = c.AckWait, c.MaxDeliver, c.MaxAckPending
	for _, m := range s.mismatches {
		s.opts.Logger.Warn().Str("stream", m.Stream).Str("setting", m.Setting).Str("key", m.Key).
			Str("deployed", m.Deployed).Str("wanted", m.Wanted).Msg(m.String())
	}
}

// Mismatches returns the shared settings of the deployment that differ
// from the options Declare was given, each kept as deployed.
func (s *Store) Mismatches() []Mismatch { return slices.Clone(s.mismatches) }

// Health is the bucket of per-bot health records and silence baselines.
func (s *Store) Health() natsjs.KeyValue { return s.health }

// Incidents is the bucket of incidents (see pkg/heal/incident).
func (s *Store) Incidents() natsjs.KeyValue { return s.incidents }

// Limits is the bucket of the limits' use counters (see pkg/limits).
func (s *Store) Limits() natsjs.KeyValue { return s.limits }

// LimitsTTL is how long a use counter is kept after its last write: a
// counter holds one UTC day, so a day and an hour's margin is enough.
const LimitsTTL = 25 * time.Hour

// IncidentTTL is how long an incident is kept: a quarter, long enough for
// `botctl incidents report` over the last 90 days.
const IncidentTTL = 92 * 24 * time.Hour

// Names returns the names of what the store uses.
func (s *Store) Names() Names { return s.names }

// Options returns the options the store was declared with, defaults filled.
func (s *Store) Options() Options { return s.opts }

// JetStream returns the JetStream handle the store was declared on.
func (s *Store) JetStream() natsjs.JetStream { return s.js }

// TaskStream returns the task stream.
func (s *Store) TaskStream() natsjs.Stream { return s.stream }

// Workers returns the durable pull consumer workers fetch tasks from. A
// worker acks a task when done (which removes it and frees the conversation),
// sends InProgress while it runs, and calls GiveUp instead of a last Nak.
func (s *Store) Workers() natsjs.Consumer { return s.workers }

// Tasks returns the bucket of task records, keyed by TaskKey(task id).
func (s *Store) Tasks() natsjs.KeyValue { return s.tasks }

// Output returns the bucket of per-task output, keyed by TaskKey(task id):
// each attempt's last write, the answer as it ended.
func (s *Store) Output() natsjs.KeyValue { return s.output }

// Progress returns the bucket of answers in progress (memory storage),
// keyed by TaskKey(task id): a running attempt's text so far.
func (s *Store) Progress() natsjs.KeyValue { return s.progress }

// Context returns the bucket of conversation context, keyed by
// ConversationKey(bot, conversation).
func (s *Store) Context() natsjs.KeyValue { return s.context }

// Watermarks returns the bucket of per-bot watermarks, keyed by
// BotKey(bot) (or BotKey(bot)+"."+name for several per bot).
func (s *Store) Watermarks() natsjs.KeyValue { return s.watermarks }

// Undelivered is the index of tasks not yet delivered (bucket
// Names.PendingBucket; "pending" there is the bucket's name, kept for the
// stores already deployed, not the delivery state): a key
// UndeliveredKey(bot, task) from the moment a task record exists until its
// delivery is final.
// A new leader lists its bot's keys (UndeliveredFilter) instead of reading
// every record.
func (s *Store) Undelivered() natsjs.KeyValue { return s.undelivered }

// SeenTTL is how long a message handled without a task is remembered:
// longer than any gap the backfill reads.
const SeenTTL = 24 * time.Hour

// MarkSeen records that bot's message msgid was handled without a task.
func (s *Store) MarkSeen(ctx context.Context, bot, msgid string) error {
	if _, err := s.seen.Put(ctx, EncodeToken(bot)+"."+EncodeToken(msgid), nil); err != nil {
		return fmt.Errorf("mark message %s seen: %w", msgid, err)
	}
	return nil
}

// Seen reports whether MarkSeen recorded bot's message msgid.
func (s *Store) Seen(ctx context.Context, bot, msgid string) (bool, error) {
	_, err := s.seen.Get(ctx, EncodeToken(bot)+"."+EncodeToken(msgid))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("message %s seen: %w", msgid, err)
	}
	return true, nil
}

// UndeliveredKey is a task's key in the undelivered index: "<bot>.<task id>".
func UndeliveredKey(bot, taskID string) string { return EncodeToken(bot) + "." + EncodeToken(taskID) }

// UndeliveredFilter matches every undelivered key of bot.
func UndeliveredFilter(bot string) string { return EncodeToken(bot) + ".*" }

// TaskSubject is the subject of a conversation's task; see Names.TaskSubject.
func (s *Store) TaskSubject(bot, conversation string) string {
	return s.names.TaskSubject(bot, conversation)
}

// ParseTaskSubject returns the bot and conversation of a task subject, for
// a worker holding a message: s.ParseTaskSubject(msg.Subject()).
func (s *Store) ParseTaskSubject(subject string) (bot, conversation string, err error) {
	return s.names.ParseTaskSubject(subject)
}

// MarkUndelivered puts a task in the undelivered index (idempotent).
func (s *Store) MarkUndelivered(ctx context.Context, bot, taskID string) error {
	if _, err := s.undelivered.Put(ctx, UndeliveredKey(bot, taskID), nil); err != nil {
		return fmt.Errorf("mark task %s undelivered: %w", taskID, err)
	}
	return nil
}

// ClearUndelivered takes a task out of the undelivered index (idempotent).
func (s *Store) ClearUndelivered(ctx context.Context, bot, taskID string) error {
	if err := s.undelivered.Purge(ctx, UndeliveredKey(bot, taskID)); err != nil && !errors.Is(err, natsjs.ErrKeyNotFound) {
		return fmt.Errorf("clear undelivered task %s: %w", taskID, err)
	}
	return nil
}

// UndeliveredTasks lists the ids of bot's tasks in the undelivered index.
func (s *Store) UndeliveredTasks(ctx context.Context, bot string) ([]string, error) {
	lister, err := s.undelivered.ListKeysFiltered(ctx, UndeliveredFilter(bot))
	if errors.Is(err, natsjs.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list undelivered tasks of bot %s: %w", bot, err)
	}
	prefix := EncodeToken(bot) + "."
	var ids []string
	for key := range lister.Keys() {
		id, err := DecodeToken(strings.TrimPrefix(key, prefix))
		if err == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
