package jetstream

import natsjs "github.com/nats-io/nats.go/jetstream"

// What Declare creates: the task stream, its workers consumer and the
// buckets, from a Store's names and options. Declare and Mismatches read
// them, so that a deployment is compared with exactly what a node would
// create.

// taskStreamConfig is the task stream as Declare creates it.
func (s *Store) taskStreamConfig() natsjs.StreamConfig {
	n, opts := s.names, s.opts
	return natsjs.StreamConfig{
		Name:        n.TaskStream,
		Description: "botctl tasks: one per conversation at a time; a second is refused (the conversation mutex)",
		Subjects:    []string{n.TaskSubjectPrefix + ".*.*"},
		Retention:   natsjs.WorkQueuePolicy,
		Storage:     natsjs.FileStorage,
		Replicas:    opts.Replicas,
		// The conversation mutex: at most one message per conversation
		// subject, and the server refuses the next one (err_code 10077,
		// "maximum messages per subject exceeded") instead of replacing it.
		MaxMsgsPerSubject:    1,
		Discard:              natsjs.DiscardNew,
		DiscardNewPerSubject: true,
		// Idempotent dispatch: the WeCom msgid is the message id.
		Duplicates: opts.DuplicateWindow,
	}
}

// workersConfig is the workers consumer as Declare creates it.
func (s *Store) workersConfig() natsjs.ConsumerConfig {
	n, opts := s.names, s.opts
	return natsjs.ConsumerConfig{
		Durable:       n.Consumer,
		Description:   "botctl workers pull tasks here, on every node",
		DeliverPolicy: natsjs.DeliverAllPolicy,
		AckPolicy:     natsjs.AckExplicitPolicy,
		AckWait:       opts.TaskAckWait,
		MaxDeliver:    opts.TaskMaxDeliver,
		MaxAckPending: opts.TaskMaxRunning,
		Replicas:      opts.Replicas,
	}
}

// bucketSpec is one KV bucket Declare binds to a field of the Store.
type bucketSpec struct {
	kv     *natsjs.KeyValue
	cfg    natsjs.KeyValueConfig
	direct bool // reads answered by any replica (see leaderReads)
}

// bucketSpecs are the buckets as Declare creates them.
func (s *Store) bucketSpecs() []bucketSpec {
	n, opts := s.names, s.opts
	// History 1 everywhere but the context bucket: a task record carries its
	// own transition log (state, reason, time), the output value is the
	// accumulated answer so only the latest matters (a watch resuming from a
	// watermark sees the latest value of each key changed since), and a
	// watermark is a single number.
	//
	// Every bucket is on disk but one: the progress bucket, whose values
	// are the texts of answers still being written. Each is rewritten
	// whole every worker.output_interval and outlived by the attempt's
	// last write to the output bucket, so losing them (every server of
	// the bucket restarted at once) loses no answer: a running attempt's
	// next write puts its text back. In memory a replicated write costs
	// the servers about half the CPU of one on disk with sync_interval
	// always (no file write, no fsync, the Raft log in memory), and the
	// progress writes are most of an answer's writes (issue 28).
	buckets := []bucketSpec{
		{kv: &s.tasks, cfg: natsjs.KeyValueConfig{
			Bucket:      n.TasksBucket,
			Description: "botctl task records: raw message context, execution and delivery state; key = task id",
			History:     1,
			TTL:         opts.RecordTTL,
		}},
		{kv: &s.output, cfg: natsjs.KeyValueConfig{
			Bucket:      n.OutputBucket,
			Description: "botctl task output: an attempt's last write, the whole answer (its text in progress is in the progress bucket); key = task id",
			History:     1,
			TTL:         opts.RecordTTL,
		}},
		{kv: &s.progress, direct: true, cfg: natsjs.KeyValueConfig{
			Bucket:      n.ProgressBucket,
			Description: "botctl answers in progress, in memory: the text so far of each running attempt, written by workers, watched by the pusher; key = task id",
			History:     1,
			TTL:         ProgressTTL,
			Storage:     natsjs.MemoryStorage,
		}},
		{kv: &s.context, cfg: natsjs.KeyValueConfig{
			Bucket:      n.ContextBucket,
			Description: "botctl conversation context for multi-turn answers; key = <bot>.<conversation>",
			History:     uint8(opts.ContextHistory),
			TTL:         opts.ContextTTL,
			MaxBytes:    opts.ContextMaxBytes,
		}},
		{kv: &s.undelivered, cfg: natsjs.KeyValueConfig{
			Bucket:      n.PendingBucket,
			Description: "botctl index of tasks not yet delivered, so a new leader finds them without reading every record; key = <bot>.<task id>",
			History:     1,
			TTL:         opts.RecordTTL,
		}},
		{kv: &s.seen, cfg: natsjs.KeyValueConfig{
			Bucket:      n.SeenBucket,
			Description: "botctl messages handled without a task (busy, commands, refusals), so the gap backfill does not answer them again; key = <bot>.<msgid>",
			History:     1,
			TTL:         SeenTTL,
		}},
		{kv: &s.watermarks, cfg: natsjs.KeyValueConfig{
			Bucket:      n.WatermarksBucket,
			Description: "botctl per-bot watermarks (pusher revision, last inbound event); key = bot",
			History:     1,
		}},
		{kv: &s.health, cfg: natsjs.KeyValueConfig{
			Bucket:      n.HealthBucket,
			Description: "botctl per-bot health: the shared record the three signals write (key = bot) and the hour-of-week silence baseline (key = baseline.<bot>)",
			History:     1,
		}},
		{kv: &s.incidents, cfg: natsjs.KeyValueConfig{
			Bucket:      n.IncidentsBucket,
			Description: "botctl incidents: T1/T2/T3, downtime, how each recovered, alerts sent; key = inc.<bot>.<id>, and open.<bot> points at a bot's open incident",
			History:     1,
			TTL:         IncidentTTL,
		}},
		{kv: &s.limits, cfg: natsjs.KeyValueConfig{
			Bucket:      n.LimitsBucket,
			Description: "botctl use counters of the per-user and per-bot limits (messages a minute and a day, tokens a day); key = <bot>.user.<user> or <bot>.bot",
			History:     1,
			TTL:         LimitsTTL,
		}},
	}
	for i := range buckets {
		b := &buckets[i]
		if b.cfg.Storage != natsjs.MemoryStorage {
			b.cfg.Storage = natsjs.FileStorage
		}
		b.cfg.Replicas = opts.Replicas
		if b.cfg.MaxBytes == 0 {
			b.cfg.MaxBytes = -1
		}
	}
	return buckets
}
