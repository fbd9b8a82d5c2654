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

// declareMedia creates the media object store if it is missing, or
// updates it when its TTL or replicas differ from opts.
func declareMedia(ctx context.Context, js jetstream.JetStream, bucket string, opts Options) (jetstream.ObjectStore, error) {
	cfg := jetstream.ObjectStoreConfig{
		Bucket:      bucket,
		Description: "botctl files users sent (images, files, videos), stored at receipt for the worker that runs the task; name = <task id>/<n>",
		TTL:         opts.MediaTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    opts.Replicas,
	}
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
	if st.TTL() != cfg.TTL || st.Replicas() != cfg.Replicas {
		return js.UpdateObjectStore(ctx, cfg)
	}
	return obs, nil
}
