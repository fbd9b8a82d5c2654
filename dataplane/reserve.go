package dataplane

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// The media store shares JetStream's storage (a server's max_file_store)
// with the task queue and every bucket. Its bound (MediaMaxBytes, with
// DiscardNew) keeps it from taking more than that bound, ever; what the
// others have is the storage less what media holds. Options.ReserveBytes
// makes the servers check, at start, that this is at least ReserveBytes:
// JetStream sets aside each stream's MaxBytes on every server that holds
// it, and refuses a stream whose MaxBytes does not fit beside those set
// aside already (JSStorageResourcesExceededErr). An empty stream whose
// MaxBytes is ReserveBytes, declared before the media store, turns a
// media bound too large for the storage into a start that fails naming
// the keys, instead of a full disk under load that stops every bot.
//
// What it does not: reserve anything at write time (JetStream checks a
// write against the storage used, not set aside), bound the queue or the
// buckets themselves, or see storage taken outside JetStream.

// declareReserve creates or updates the reservation stream, or removes it
// when opts.ReserveBytes is zero.
func declareReserve(ctx context.Context, js jetstream.JetStream, n Names, opts Options) error {
	if opts.ReserveBytes == 0 {
		err := js.DeleteStream(ctx, n.ReserveStream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		return err
	}
	cfg := jetstream.StreamConfig{
		Name:        n.ReserveStream,
		Description: "botctl: no messages; its MaxBytes sets aside storage for the task queue and the buckets, so that the media store's bound cannot take it",
		Subjects:    []string{strings.TrimSuffix(n.TaskSubjectPrefix, ".tasks") + ".reserve"},
		Storage:     jetstream.FileStorage,
		Replicas:    opts.Replicas,
		MaxBytes:    opts.ReserveBytes,
		MaxMsgs:     1,
		Discard:     jetstream.DiscardNew,
	}
	st, err := js.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil // another node created it first
		}
	case err == nil:
		if have := st.CachedInfo().Config; have.MaxBytes != cfg.MaxBytes || have.Replicas != cfg.Replicas {
			_, err = js.UpdateStream(ctx, cfg)
		}
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeInsufficientStorage {
		return fmt.Errorf("%d bytes for the task queue and buckets cannot be reserved on the JetStream servers (%w): lower media.reserve_bytes, or give JetStream more storage (max_file_store)", cfg.MaxBytes, err)
	}
	return err
}

// Deployed is the options the deployment of prefix was declared with, as
// far as its streams tell (replicas, the media store's TTL and bound, the
// reservation), for a tool that opens it with Declare: given them,
// Declare changes nothing. What a stream does not tell (missing, or
// unreadable) is left zero: the default.
func Deployed(ctx context.Context, js jetstream.JetStream, prefix string) Options {
	o := Options{Prefix: prefix}
	n := NamesFor(prefix)
	if st, err := js.Stream(ctx, n.TaskStream); err == nil {
		o.Replicas = st.CachedInfo().Config.Replicas
	}
	if st, err := js.Stream(ctx, mediaStream(n.MediaBucket)); err == nil {
		c := st.CachedInfo().Config
		o.MediaTTL = c.MaxAge
		if c.MaxBytes > 0 {
			o.MediaMaxBytes = c.MaxBytes
		}
	}
	if st, err := js.Stream(ctx, n.ReserveStream); err == nil {
		o.ReserveBytes = st.CachedInfo().Config.MaxBytes
	}
	return o
}
