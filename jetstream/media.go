package jetstream

import (
	"context"
	"errors"
	"fmt"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"slices"
	"strings"
	"time"
)

// DefaultMediaTTL is Options.MediaTTL's default: a day, far longer than a
// task waits and runs (worker.deadline, 30 minutes by default), short
// enough that users' files do not pile up.
const DefaultMediaTTL = 24 * time.Hour

// DefaultMediaMaxBytes is Options.MediaMaxBytes's default: 4 GiB, a fifth
// of a 20 GB JetStream store. A task's files are deleted once its
// delivery is final, so the store holds the files of tasks in flight,
// and the TTL's backstop.
const DefaultMediaMaxBytes = 4 << 30

// Media is the object store of the files users sent (images, files,
// videos) and of the images and files of replies: the leader stores each
// one when its message arrives (WeCom's URL works for minutes only), and
// the worker that runs the task reads it, on whichever node. Objects are
// named <task id>/<n> (task.ReplyKey: reply/<task id>/<attempt>/<n>), are
// deleted when the task's delivery is final (DeleteMedia), and expire
// after MediaTTL whatever happens.
//
// The store holds at most MediaMaxBytes: a write past it is refused
// (MediaFull) and keeps nothing, and no other stream or bucket is
// touched by it.
func (s *Store) Media() natsjs.ObjectStore { return s.media }

// MediaMaxBytes is the media store's bound: the deployed one (Declare
// keeps it, or applies Options.MediaMaxBytes to a store that had none).
func (s *Store) MediaMaxBytes() int64 { return s.opts.MediaMaxBytes }

// MediaBytes is what the media store holds now, in bytes (its stream's
// size on the server that answered).
func (s *Store) MediaBytes(ctx context.Context) (int64, error) {
	st, err := s.media.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("media store status: %w", err)
	}
	return int64(st.Size()), nil
}

// maxBytesDescription is nats-server's ErrMaxBytes, the description of a
// JSStreamStoreFailedF (10077) refusal by a stream's MaxBytes under
// DiscardNew (see busyDescription for why the code alone says nothing).
const maxBytesDescription = "maximum bytes exceeded"

// MediaFull reports whether err, from a write to the media store, is the
// store's bound (MediaMaxBytes) refusing it: the store is full until
// objects are deleted or expire. Nothing of the refused object is kept.
func MediaFull(err error) bool {
	var apiErr *natsjs.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStoreFailed && apiErr.Description == maxBytesDescription
}

// DeleteMedia deletes the media objects named keys, each one's bytes
// first and then its name: a full store (MediaFull) refuses the small
// deletion marker the name's deletion writes, but not the purge of the
// bytes that makes room for it. A key not stored (deleted already,
// expired) is no error. It returns the first other error, after trying
// every key.
func (s *Store) DeleteMedia(ctx context.Context, keys ...string) error {
	var first error
	for _, key := range keys {
		if err := s.deleteMedia(ctx, key); err != nil && first == nil {
			first = fmt.Errorf("delete media object %s: %w", key, err)
		}
	}
	return first
}

func (s *Store) deleteMedia(ctx context.Context, key string) error {
	info, err := s.media.GetInfo(ctx, key)
	if errors.Is(err, natsjs.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.NUID != "" {
		if err := s.mediaStream.Purge(ctx, natsjs.WithPurgeSubject(mediaChunks(s.names.MediaBucket, info.NUID))); err != nil {
			return err
		}
	}
	if err := s.media.Delete(ctx, key); err != nil && !errors.Is(err, natsjs.ErrObjectNotFound) {
		return err
	}
	return nil
}

// errCodeInsufficientStorage is nats-server's
// JSStorageResourcesExceededErr: the servers cannot reserve a stream's
// MaxBytes.
const errCodeInsufficientStorage natsjs.ErrorCode = 10047

// errCodeNoPeers is nats-server's JSClusterNoPeersErrF: no servers to
// place a stream's replicas on. Its description says why; "insufficient
// storage" among the reasons is a MaxBytes the servers cannot set aside.
const errCodeNoPeers natsjs.ErrorCode = 10005

// StorageTooSmall reports whether err is JetStream refusing a stream
// because the servers' storage cannot set its MaxBytes aside: 10047 from
// one server, 10005 "no suitable peers for placement, insufficient
// storage" from a cluster. Waiting does not fix it; the configuration
// (media.max_store_bytes, media.reserve_bytes) or max_file_store must
// change.
func StorageTooSmall(err error) bool {
	var apiErr *natsjs.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == errCodeInsufficientStorage ||
		apiErr.ErrorCode == errCodeNoPeers && strings.Contains(apiErr.Description, "insufficient storage")
}

// declareMedia creates the media object store if it is missing. On one
// that exists it keeps the deployed replicas and limits (keepMedia), adds
// each difference from opts to found, and sets opts' media settings to
// the deployed ones. It updates the store only for its description, or
// to bound a store deployed without a bound.
func declareMedia(ctx context.Context, js natsjs.JetStream, bucket string, opts *Options, found *[]Mismatch) (natsjs.ObjectStore, natsjs.Stream, error) {
	cfg := mediaConfig(bucket, *opts)
	obs, err := declareObjectStore(ctx, js, &cfg, opts.Logger, found)
	if StorageTooSmall(err) {
		return nil, nil, fmt.Errorf("its bound of %d bytes cannot be reserved on the JetStream servers beside what is reserved already (media.reserve_bytes: %d) (%w): lower media.max_store_bytes, or give JetStream more storage (max_file_store)", cfg.MaxBytes, opts.ReserveBytes, err)
	}
	if err != nil {
		return nil, nil, err
	}
	st, err := js.Stream(ctx, mediaStream(cfg).Name)
	if err != nil {
		return nil, nil, err
	}
	opts.MediaTTL, opts.MediaMaxBytes = cfg.TTL, cfg.MaxBytes
	return obs, st, nil
}

// declareObjectStore creates the object store of cfg if it is missing,
// or keeps the deployed one's settings in cfg (keepMedia) and updates it
// where they differ (a description, a bound it had none of).
func declareObjectStore(ctx context.Context, js natsjs.JetStream, cfg *natsjs.ObjectStoreConfig, log zerolog.Logger, found *[]Mismatch) (natsjs.ObjectStore, error) {
	obs, err := js.ObjectStore(ctx, cfg.Bucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, *cfg)
		if err == nil || !errors.Is(err, natsjs.ErrBucketExists) {
			return obs, err
		}
		obs, err = js.ObjectStore(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, mediaStream(*cfg).Name)
	if err != nil {
		return nil, err
	}
	have := st.CachedInfo().Config
	mismatches, bounded := keepMedia(have, cfg)
	*found = append(*found, mismatches...)
	if bounded {
		log.Warn().Str("stream", have.Name).Str("setting", "max-bytes").Str("key", mediaKeys["max-bytes"]).
			Int64("deployed", have.MaxBytes).Int64("applied", cfg.MaxBytes).
			Msg(have.Name + ": deployed without a bound; media.max_store_bytes is applied (the one deployed setting a node changes: a store without a bound can fill the servers' storage)")
	}
	if bounded || have.Description != cfg.Description {
		return js.UpdateObjectStore(ctx, *cfg)
	}
	return obs, nil
}

// keepMedia is keepStream for the media object store: cfg takes the
// deployed replicas and limits, but for one. A store deployed without a
// bound (MaxBytes -1, every store of a botctl that did not bound it)
// takes cfg's bound instead, which is then no mismatch: bounded says so.
// A deployed bound that differs from cfg's is kept, as any limit.
func keepMedia(have natsjs.StreamConfig, cfg *natsjs.ObjectStoreConfig) (found []Mismatch, bounded bool) {
	want := mediaStream(*cfg)
	bound := want.MaxBytes
	found = keepStream(have, &want, mediaKeys)
	if have.MaxBytes <= 0 && bound > 0 {
		found = slices.DeleteFunc(found, func(m Mismatch) bool { return m.Setting == "max-bytes" })
		want.MaxBytes, bounded = bound, true
	}
	cfg.Replicas, cfg.Storage, cfg.TTL, cfg.MaxBytes = want.Replicas, want.Storage, want.MaxAge, want.MaxBytes
	return found, bounded
}

// mediaConfig is the media object store as declareMedia creates it.
func mediaConfig(bucket string, opts Options) natsjs.ObjectStoreConfig {
	return natsjs.ObjectStoreConfig{
		Bucket:      bucket,
		Description: "botctl files users sent (images, files, videos), stored at receipt for the worker that runs the task, and replies' images and files; name = <task id>/<n> or reply/<task id>/<attempt>/<n>",
		TTL:         opts.MediaTTL,
		MaxBytes:    opts.MediaMaxBytes,
		Storage:     natsjs.FileStorage,
		Replicas:    opts.Replicas,
	}
}

// mediaStream is the part of the media object store's stream that
// keepStream compares, as nats.go creates it.
func mediaStream(cfg natsjs.ObjectStoreConfig) natsjs.StreamConfig {
	return natsjs.StreamConfig{Name: "OBJ_" + cfg.Bucket, Replicas: cfg.Replicas, Storage: cfg.Storage,
		MaxAge: cfg.TTL, MaxBytes: cfg.MaxBytes}
}

// mediaChunks is the subject of one object's bytes (nats.go's layout).
func mediaChunks(bucket, nuid string) string { return "$O." + bucket + ".C." + nuid }

// mediaKeys name the configuration keys of the media object store's
// settings.
var mediaKeys = map[string]string{"replicas": "nats.replicas", "max-age": "media.ttl", "max-bytes": "media.max_store_bytes"}
