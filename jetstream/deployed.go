package jetstream

import (
	"context"
	"errors"
	"fmt"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// A Mismatch is a shared setting of a deployed stream, bucket, object
// store or consumer that differs from what a node's Options ask for.
//
// Every node shares one data plane, so none changes its replicas or its
// limits at start: Declare creates what is missing with the node's
// Options, and on what exists it keeps the deployed value of each of
// these settings and reports the difference. A node started without
// nats.replicas (1) therefore leaves an R3 deployment at R3. An operator
// changes a deployed setting on purpose with the nats CLI (`nats stream
// edit`, `nats consumer edit`; docs/jetstream.md), then aligns the nodes'
// configuration.
type Mismatch struct {
	// Stream is the JetStream stream: BOTCTL_TASKS, KV_BOTCTL_TASKS
	// (bucket BOTCTL_TASKS), OBJ_BOTCTL_MEDIA (object store BOTCTL_MEDIA);
	// for the workers consumer, BOTCTL_TASKS/workers.
	Stream string
	// Setting is named as `nats stream edit` and `nats consumer edit`
	// name their flags: replicas, storage, max-age, max-bytes,
	// max-msgs-per-subject, dupe-window; the consumer's wait, max-deliver,
	// max-pending.
	Setting string
	// Key is the configuration key that asks for the setting
	// (nats.replicas, media.ttl), or "" when no key sets it (the value is
	// this botctl version's).
	Key string
	// Deployed is the value kept, Wanted the node's.
	Deployed, Wanted string
}

func (m Mismatch) String() string {
	asks := "this node asks " + m.Wanted
	if m.Key != "" {
		asks = "this node's " + m.Key + " asks " + m.Wanted
	}
	return fmt.Sprintf("%s: %s is %s deployed, %s; the deployed value is kept (change it on purpose with the nats CLI, docs/jetstream.md, then set the nodes' configuration to match)",
		m.Stream, m.Setting, m.Deployed, asks)
}

// replicasKey names the key of the one setting every stream, bucket and
// consumer takes from the configuration.
var replicasKey = map[string]string{"replicas": "nats.replicas"}

// keep records in found a mismatch of one setting and sets want to the
// deployed value have.
func keep[T comparable](found *[]Mismatch, stream, setting string, keys map[string]string, have T, want *T) {
	if have != *want {
		*found = append(*found, Mismatch{Stream: stream, Setting: setting, Key: keys[setting], Deployed: fmt.Sprint(have), Wanted: fmt.Sprint(*want)})
	}
	*want = have
}

// keepStream keeps the deployed replicas and limits of a stream in want,
// and returns the settings in which want differed. A limit want leaves
// zero where zero is not "none" (a stream's per-subject cap, its
// duplicate window) is not one botctl sets: it is not compared.
func keepStream(have natsjs.StreamConfig, want *natsjs.StreamConfig, keys map[string]string) []Mismatch {
	var found []Mismatch
	name := have.Name
	if want.MaxBytes == 0 {
		want.MaxBytes = -1 // nats.go's and the server's "unlimited"
	}
	keep(&found, name, "replicas", keys, have.Replicas, &want.Replicas)
	keep(&found, name, "storage", keys, have.Storage, &want.Storage)
	keep(&found, name, "max-age", keys, have.MaxAge, &want.MaxAge)
	keep(&found, name, "max-bytes", keys, have.MaxBytes, &want.MaxBytes)
	if want.MaxMsgsPerSubject != 0 {
		keep(&found, name, "max-msgs-per-subject", keys, have.MaxMsgsPerSubject, &want.MaxMsgsPerSubject)
	}
	if want.Duplicates != 0 {
		keep(&found, name, "dupe-window", keys, have.Duplicates, &want.Duplicates)
	}
	return found
}

// keepBucket is keepStream for a KV bucket's config.
func keepBucket(have natsjs.StreamConfig, want *natsjs.KeyValueConfig) []Mismatch {
	s := bucketStream(*want)
	found := keepStream(have, &s, replicasKey)
	want.Replicas, want.Storage, want.TTL, want.MaxBytes, want.History = s.Replicas, s.Storage, s.MaxAge, s.MaxBytes, uint8(s.MaxMsgsPerSubject)
	return found
}

// bucketStream is the part of a KV bucket's stream that keepStream
// compares, as nats.go creates it.
func bucketStream(cfg natsjs.KeyValueConfig) natsjs.StreamConfig {
	history := int64(max(cfg.History, 1))
	return natsjs.StreamConfig{Name: "KV_" + cfg.Bucket, Replicas: cfg.Replicas, Storage: cfg.Storage,
		MaxAge: cfg.TTL, MaxBytes: cfg.MaxBytes, MaxMsgsPerSubject: history}
}

// keepConsumer is keepStream for the workers consumer.
func keepConsumer(stream string, have natsjs.ConsumerConfig, want *natsjs.ConsumerConfig) []Mismatch {
	var found []Mismatch
	name := stream + "/" + want.Durable
	keep(&found, name, "replicas", replicasKey, have.Replicas, &want.Replicas)
	keep(&found, name, "wait", nil, have.AckWait, &want.AckWait)
	keep(&found, name, "max-deliver", nil, have.MaxDeliver, &want.MaxDeliver)
	keep(&found, name, "max-pending", nil, have.MaxAckPending, &want.MaxAckPending)
	return found
}

// Mismatches reads the deployed streams, buckets, object store and
// consumer of opts.Prefix and returns each shared setting that differs
// from what opts asks for (see Mismatch), as Declare would find them. It
// changes nothing and creates nothing: what is not deployed has no
// mismatch.
func Mismatches(ctx context.Context, js natsjs.JetStream, opts Options) ([]Mismatch, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{opts: opts, names: NamesFor(opts.Prefix)}
	var found []Mismatch
	compare := func(want natsjs.StreamConfig, keys map[string]string) error {
		st, err := js.Stream(ctx, want.Name)
		if errors.Is(err, natsjs.ErrStreamNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read stream %s: %w", want.Name, err)
		}
		found = append(found, keepStream(st.CachedInfo().Config, &want, keys)...)
		if want.Name != s.names.TaskStream {
			return nil
		}
		cfg := s.workersConfig()
		c, err := st.Consumer(ctx, cfg.Durable)
		if errors.Is(err, natsjs.ErrConsumerNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read consumer %s on %s: %w", cfg.Durable, want.Name, err)
		}
		found = append(found, keepConsumer(want.Name, c.CachedInfo().Config, &cfg)...)
		return nil
	}
	if err := compare(s.taskStreamConfig(), replicasKey); err != nil {
		return nil, err
	}
	for _, b := range s.bucketSpecs() {
		if err := compare(bucketStream(b.cfg), replicasKey); err != nil {
			return nil, err
		}
	}
	reserve := reserveConfig(s.names, opts)
	have, err := deployedStream(ctx, js, reserve.Name)
	if err != nil {
		return nil, err
	}
	if have != nil {
		found = append(found, keepReserve(*have, &reserve, opts.ReserveBytes)...)
	}
	media := mediaConfig(s.names.MediaBucket, opts)
	if have, err = deployedStream(ctx, js, mediaStream(media).Name); err != nil {
		return nil, err
	}
	if have != nil {
		mismatches, _ := keepMedia(*have, &media) // a store without a bound is bounded at start: no mismatch
		found = append(found, mismatches...)
	}
	return found, nil
}

// deployedStream is the config of the deployed stream name, or nil if
// there is none.
func deployedStream(ctx context.Context, js natsjs.JetStream, name string) (*natsjs.StreamConfig, error) {
	st, err := js.Stream(ctx, name)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", name, err)
	}
	c := st.CachedInfo().Config
	return &c, nil
}
