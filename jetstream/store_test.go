package jetstream

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/natscount"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

func TestDeclareCreatesEverything(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx := ctxT(t)
	st := declare(t, js, Options{})

	n := st.Names()
	want := Names{
		TaskStream:          "BOTCTL_TASKS",
		TaskSubjectPrefix:   "botctl.tasks",
		NoticeSubjectPrefix: "botctl.notice",
		CancelSubjectPrefix: "botctl.cancel",
		FlushSubjectPrefix:  "botctl.flush",
		Consumer:            "workers",
		TasksBucket:         "BOTCTL_TASKS",
		OutputBucket:        "BOTCTL_OUTPUT",
		ProgressBucket:      "BOTCTL_PROGRESS",
		ContextBucket:       "BOTCTL_CONTEXT",
		WatermarksBucket:    "BOTCTL_WATERMARKS",
		PendingBucket:       "BOTCTL_PENDING",
		SeenBucket:          "BOTCTL_SEEN",
		HealthBucket:        "BOTCTL_HEALTH",
		IncidentsBucket:     "BOTCTL_INCIDENTS",
		LimitsBucket:        "BOTCTL_LIMITS",
		MediaBucket:         "BOTCTL_MEDIA",
		ReserveStream:       "BOTCTL_RESERVE",
	}
	if n != want {
		t.Fatalf("Names() = %+v, want %+v", n, want)
	}

	info, err := st.TaskStream().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := info.Config
	if c.Retention != natsjs.WorkQueuePolicy || c.MaxMsgsPerSubject != 1 || !c.DiscardNewPerSubject ||
		c.Discard != natsjs.DiscardNew || c.Duplicates != 10*time.Minute || c.Storage != natsjs.FileStorage ||
		c.Replicas != 1 || !reflect.DeepEqual(c.Subjects, []string{"botctl.tasks.*.*"}) {
		t.Fatalf("task stream config = %+v", c)
	}

	ci, err := st.Workers().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cc := ci.Config
	if cc.Durable != "workers" || cc.AckPolicy != natsjs.AckExplicitPolicy || cc.AckWait != 30*time.Second || cc.MaxDeliver != 5 ||
		cc.MaxAckPending != DefaultTaskMaxRunning {
		t.Fatalf("workers consumer config = %+v", cc)
	}

	for _, b := range []struct {
		kv      natsjs.KeyValue
		name    string
		history int64
		ttl     time.Duration
		storage natsjs.StorageType
	}{
		{st.Tasks(), "BOTCTL_TASKS", 1, 7 * 24 * time.Hour, natsjs.FileStorage},
		{st.Output(), "BOTCTL_OUTPUT", 1, 7 * 24 * time.Hour, natsjs.FileStorage},
		// Answers in progress are in memory (issue 28): rewritten whole
		// every output interval, outlived by the output bucket's answer.
		{st.Progress(), "BOTCTL_PROGRESS", 1, ProgressTTL, natsjs.MemoryStorage},
		{st.Context(), "BOTCTL_CONTEXT", 1, 24 * time.Hour, natsjs.FileStorage},
		{st.Watermarks(), "BOTCTL_WATERMARKS", 1, 0, natsjs.FileStorage},
	} {
		status, err := b.kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if status.Bucket() != b.name || status.History() != b.history || status.TTL() != b.ttl {
			t.Errorf("bucket %s: got %s history %d ttl %s, want history %d ttl %s",
				b.name, status.Bucket(), status.History(), status.TTL(), b.history, b.ttl)
		}
		if bs, ok := status.(*natsjs.KeyValueBucketStatus); !ok || bs.StreamInfo().Config.Storage != b.storage {
			t.Errorf("bucket %s: storage %v, want %v", b.name, bs.StreamInfo().Config.Storage, b.storage)
		}
	}
	// The media object store: files users sent, kept a day.
	ms, err := st.Media().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ms.Bucket() != "BOTCTL_MEDIA" || ms.TTL() != DefaultMediaTTL || ms.Replicas() != 1 {
		t.Errorf("media store %s ttl %s replicas %d, want BOTCTL_MEDIA, %s, 1", ms.Bucket(), ms.TTL(), ms.Replicas(), DefaultMediaTTL)
	}
}

// Declaring again, from another node or after a restart of the server on
// the same data dir, changes nothing and keeps every task and record.
func TestDeclareIsIdempotent(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	nc, js := connect(t, srv)
	ctx := ctxT(t)
	opts := Options{TaskAckWait: 45 * time.Second, ContextHistory: 5}

	st := declare(t, js, opts)
	before := snapshot(t, st)
	if _, err := st.PublishTask(ctx, "bot1", "alice", "m1", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Tasks().Put(ctx, TaskKey("m1"), []byte(`{"state":"queued"}`)); err != nil {
		t.Fatal(err)
	}
	// Hold the task un-acked: a worker is running it.
	if batch, err := st.Workers().Fetch(1, natsjs.FetchMaxWait(10*time.Second)); err != nil {
		t.Fatal(err)
	} else {
		for range batch.Messages() {
		}
	}

	st2 := declare(t, js, opts)
	if got := snapshot(t, st2); !reflect.DeepEqual(got, before) {
		t.Fatalf("second Declare changed the configuration:\n got %+v\nwant %+v", got, before)
	}

	// Restart the server on the same data dir; a new client declares again.
	nc.Close()
	srv.stop()
	srv.start()
	_, js = connect(t, srv)
	st3 := declare(t, js, opts)
	if got := snapshot(t, st3); !reflect.DeepEqual(got, before) {
		t.Fatalf("Declare after restart changed the configuration:\n got %+v\nwant %+v", got, before)
	}
	info, err := st3.TaskStream().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("task stream holds %d messages after restart, want 1", info.State.Msgs)
	}
	ci, err := st3.Workers().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.NumAckPending != 1 {
		t.Fatalf("workers consumer has %d tasks pending ack after restart, want 1 (the running one)", ci.NumAckPending)
	}
	if e, err := st3.Tasks().Get(ctx, TaskKey("m1")); err != nil || string(e.Value()) != `{"state":"queued"}` {
		t.Fatalf("task record after restart: %v, %v", e, err)
	}
	// The conversation is still busy: the mutex survived the restart.
	if _, err := st3.PublishTask(ctx, "bot1", "alice", "m2", nil); !errorsIs(err, ErrConversationBusy) {
		t.Fatalf("publish to a busy conversation after restart: %v, want ErrConversationBusy", err)
	}
}

// declared is what Declare decides: stream, consumer and bucket configs,
// plus creation times (a re-creation would change them).
type declared struct {
	Stream   natsjs.StreamConfig
	Created  time.Time
	Consumer natsjs.ConsumerConfig
	CCreated time.Time
	Buckets  map[string]natsjs.StreamConfig
}

func snapshot(t *testing.T, st *Store) declared {
	t.Helper()
	ctx := ctxT(t)
	info, err := st.TaskStream().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := st.Workers().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := declared{Stream: info.Config, Created: info.Created.UTC(), Consumer: ci.Config, CCreated: ci.Created.UTC(), Buckets: map[string]natsjs.StreamConfig{}}
	for _, kv := range []natsjs.KeyValue{st.Tasks(), st.Output(), st.Context(), st.Watermarks()} {
		s, err := st.JetStream().Stream(ctx, "KV_"+kv.Bucket())
		if err != nil {
			t.Fatal(err)
		}
		d.Buckets[kv.Bucket()] = s.CachedInfo().Config
	}
	return d
}

// A node whose options differ from the deployment's limits leaves them
// as deployed: the consumer's ack wait and deliveries, the buckets' TTL,
// history and size, the object store's TTL, the duplicate window. Each
// difference is reported, and the store works with the deployed values.
func TestDeclareKeepsDeployedLimits(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	first := declare(t, js, Options{})
	before := snapshot(t, first)
	ctx := ctxT(t)
	media := func() time.Duration {
		s, err := js.Stream(ctx, "OBJ_"+first.Names().MediaBucket)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.MaxAge
	}
	mediaTTL := media()

	st := declare(t, js, Options{TaskAckWait: time.Minute, TaskMaxDeliver: 9, TaskMaxRunning: 10, DuplicateWindow: time.Minute,
		RecordTTL: time.Hour, ContextHistory: 5, ContextTTL: time.Hour, ContextMaxBytes: 1 << 20, MediaTTL: time.Hour})
	after := snapshot(t, st)
	if !reflect.DeepEqual(after, before) {
		t.Errorf("a node with other limits changed the deployment:\n got %+v\nwant %+v", after, before)
	}
	if got := media(); got != mediaTTL {
		t.Errorf("media object store's max age %s, want the deployed %s", got, mediaTTL)
	}
	if o := st.Options(); o.TaskAckWait != DefaultTaskAckWait || o.TaskMaxDeliver != DefaultTaskMaxDeliver {
		t.Errorf("Options(): ack wait %s, max deliver %d: want the deployed %s and %d", o.TaskAckWait, o.TaskMaxDeliver, DefaultTaskAckWait, DefaultTaskMaxDeliver)
	}
	found := map[string]string{}
	for _, m := range st.Mismatches() {
		found[m.Stream+" "+m.Setting] = m.Key
	}
	n := first.Names()
	for want, key := range map[string]string{
		n.TaskStream + "/workers wait": "", n.TaskStream + "/workers max-deliver": "", n.TaskStream + "/workers max-pending": "",
		n.TaskStream + " dupe-window": "", "KV_" + n.TasksBucket + " max-age": "", "KV_" + n.ContextBucket + " max-msgs-per-subject": "",
		"KV_" + n.ContextBucket + " max-age": "", "KV_" + n.ContextBucket + " max-bytes": "", "OBJ_" + n.MediaBucket + " max-age": "media.ttl",
	} {
		got, ok := found[want]
		if !ok || got != key {
			t.Errorf("mismatch %q: reported %v with key %q, want key %q", want, ok, got, key)
		}
	}
	if read, err := Mismatches(ctx, js, Options{MediaTTL: time.Hour}); err != nil || len(read) != 1 || read[0].Key != "media.ttl" {
		t.Errorf("Mismatches with media.ttl 1h = %v, %v: want the one of media.ttl", read, err)
	}
}

func TestDeclareRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		key  string
	}{
		{Options{Prefix: "BOT.CTL"}, "Prefix"},
		{Options{Prefix: "BOT CTL"}, "Prefix"},
		{Options{Replicas: 7}, "Replicas"},
		{Options{DuplicateWindow: time.Millisecond}, "DuplicateWindow"},
		{Options{TaskAckWait: -time.Second}, "TaskAckWait"},
		{Options{TaskMaxDeliver: -1}, "TaskMaxDeliver"},
		{Options{ContextHistory: 65}, "ContextHistory"},
		{Options{ContextTTL: -1}, "ContextTTL"},
		{Options{RecordTTL: -1}, "RecordTTL"},
		{Options{ContextMaxBytes: -5}, "ContextMaxBytes"},
		{Options{MediaMaxBytes: -1}, "MediaMaxBytes"},
		{Options{ReserveBytes: -1}, "ReserveBytes"},
	} {
		// No server needed: options are checked before any request.
		_, err := Declare(ctxT(t), nil, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("Declare(%+v) = %v, want an error naming %s", tc.opts, err, tc.key)
		}
	}
}

func TestPrefixNamesEverything(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	_, js := connect(t, srv)
	a := declare(t, js, Options{})
	b := declare(t, js, Options{Prefix: "STAGING"})
	if got := b.TaskSubject("bot", "c"); got != "staging.tasks.bot.c" {
		t.Fatalf("TaskSubject with prefix STAGING = %q", got)
	}
	ctx := ctxT(t)
	// Same conversation, two deployments: no interference.
	if _, err := a.PublishTask(ctx, "bot", "c", "m1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishTask(ctx, "bot", "c", "m1", nil); err != nil {
		t.Fatal(err)
	}
}

// Nodes start together: concurrent Declares on a fresh server all succeed.
func TestDeclareConcurrently(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	const nodes = 4
	errs := make(chan error, nodes)
	for i := 0; i < nodes; i++ {
		_, js := connect(t, srv)
		go func() {
			_, err := Declare(ctxT(t), js, Options{Logger: testLogger(t)})
			errs <- err
		}()
	}
	for i := 0; i < nodes; i++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("concurrent Declare: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("concurrent Declare still running after 1m")
		}
	}
}

// A second Declare with the same options sends no consumer create or
// update at all, as it sends no stream or bucket update.
func TestDeclareLeavesARightConsumerAlone(t *testing.T) {
	leakCheck(t)
	srv := startServer(t)
	nc, js := connect(t, srv)
	opts := Options{TaskAckWait: 45 * time.Second}
	declare(t, js, opts)
	// Counted in the order nc sent them (natscount): a create the second
	// Declare sent is counted before Load returns, not left in the
	// subscription's queue.
	creates := natscount.New(t, nc, nc, []string{"$JS.API.CONSUMER.>"}, func(m *nats.Msg) bool {
		return strings.Contains(m.Subject, ".CREATE.")
	})
	declare(t, js, opts)
	if n := creates.Load(); n != 0 {
		t.Fatalf("second Declare with the same options sent %d consumer creates", n)
	}
}
