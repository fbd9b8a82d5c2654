package dataplane

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// memoryKV is a bucket in memory storage (the progress bucket) that a
// call finding it gone declares again, then tries once more. A NATS
// server that is not clustered forgets a memory stream when it restarts
// (a cluster's meta layer keeps the stream's assignment and makes it
// again, empty), so without this the bucket would be gone until a node
// declared it at its next start: every write of an answer in progress
// would fail, and the pusher's watch of them with it. What the bucket
// held is lost either way; that is what memory storage is for here (see
// Declare).
type memoryKV struct {
	jetstream.KeyValue
	js  jetstream.JetStream
	cfg jetstream.KeyValueConfig

	mu       sync.Mutex
	declared time.Time // the last declare, at most one a second
}

// bucketGone: err is what a call on a bucket whose stream does not exist
// returns (a read's request has no responder, a write's publish no
// stream's answer, a watch or status the API's "stream not found").
func bucketGone(err error) bool {
	return err != nil && (errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders))
}

// again reports whether a call that failed with err is worth one more
// try: the bucket was gone, and is declared again (by this call, or by
// another within the last second).
func (m *memoryKV) again(ctx context.Context, err error) bool {
	if !bucketGone(err) {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if time.Since(m.declared) < time.Second {
		return true
	}
	m.declared = time.Now()
	_, derr := declareBucketConfig(ctx, m.js, m.cfg)
	return derr == nil
}

func (m *memoryKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := m.KeyValue.Get(ctx, key)
	if m.again(ctx, err) {
		e, err = m.KeyValue.Get(ctx, key)
	}
	return e, err
}

func (m *memoryKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := m.KeyValue.Put(ctx, key, value)
	if m.again(ctx, err) {
		rev, err = m.KeyValue.Put(ctx, key, value)
	}
	return rev, err
}

func (m *memoryKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := m.KeyValue.Create(ctx, key, value, opts...)
	if m.again(ctx, err) {
		rev, err = m.KeyValue.Create(ctx, key, value, opts...)
	}
	return rev, err
}

func (m *memoryKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := m.KeyValue.Update(ctx, key, value, last)
	if m.again(ctx, err) {
		rev, err = m.KeyValue.Update(ctx, key, value, last)
	}
	return rev, err
}

func (m *memoryKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	err := m.KeyValue.Delete(ctx, key, opts...)
	if m.again(ctx, err) {
		err = m.KeyValue.Delete(ctx, key, opts...)
	}
	return err
}

func (m *memoryKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	err := m.KeyValue.Purge(ctx, key, opts...)
	if m.again(ctx, err) {
		err = m.KeyValue.Purge(ctx, key, opts...)
	}
	return err
}

func (m *memoryKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := m.KeyValue.Watch(ctx, keys, opts...)
	if m.again(ctx, err) {
		w, err = m.KeyValue.Watch(ctx, keys, opts...)
	}
	return w, err
}

func (m *memoryKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := m.KeyValue.WatchAll(ctx, opts...)
	if m.again(ctx, err) {
		w, err = m.KeyValue.WatchAll(ctx, opts...)
	}
	return w, err
}

func (m *memoryKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	s, err := m.KeyValue.Status(ctx)
	if m.again(ctx, err) {
		s, err = m.KeyValue.Status(ctx)
	}
	return s, err
}
