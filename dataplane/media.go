package dataplane

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultMediaTTL is Options.MediaTTL's default: a day, far longer than a
// task waits and runs (worker.deadline, 30 minutes by default), short
// enough that users' files do not pile up.
const DefaultMediaTTL = 24 * time.Hour

// Media is the object store of the files users sent (images, files,
// videos): the leader stores each one when its message arrives (WeCom's
// URL works for minutes only), and the worker that runs the task reads it,
// on whichever node. Objects are named <task id>/<n>, and expire after
// MediaTTL.
func (s *Store) Media() jetstream.ObjectStore { return s.media }

// declareMedia creates the media object store if it is missing. On one
// that exists it keeps the deployed replicas and limits (keepStream) and
// adds each difference from opts to found.
func declareMedia(ctx context.Context, js jetstream.JetStream, bucket string, opts Options, found *[]Mismatch) (jetstream.ObjectStore, error) {
	cfg := mediaConfig(bucket, opts)
	obs, err := js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, cfg)
		if err == nil || !errors.Is(err, jetstream.ErrBucketExists) {
			return obs, err
		}
		obs, err = js.ObjectStore(ctx, bucket)
	}
	if err != nil {
		return nil, err
	}
	st, err := obs.Status(ctx)
	if err != nil {
		return nil, err
	}
	if bs, ok := st.(*jetstream.ObjectBucketStatus); ok {
		want := mediaStream(cfg)
		*found = append(*found, keepStream(bs.StreamInfo().Config, &want, mediaKeys)...)
	}
	return obs, nil
}

// mediaConfig is the media object store as declareMedia creates it.
func mediaConfig(bucket string, opts Options) jetstream.ObjectStoreConfig {
	return jetstream.ObjectStoreConfig{
		Bucket:      bucket,
		Description: "botctl files users sent (images, files, videos), stored at receipt for the worker that runs the task; name = <task id>/<n>",
		TTL:         opts.MediaTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    opts.Replicas,
	}
}

// mediaStream is the part of the media object store's stream that
// keepStream compares, as nats.go creates it.
func mediaStream(cfg jetstream.ObjectStoreConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: "OBJ_" + cfg.Bucket, Replicas: cfg.Replicas, Storage: cfg.Storage,
		MaxAge: cfg.TTL, MaxBytes: cfg.MaxBytes}
}

// mediaKeys name the configuration keys of the media object store's
// settings.
var mediaKeys = map[string]string{"replicas": "nats.replicas", "max-age": "media.ttl"}
