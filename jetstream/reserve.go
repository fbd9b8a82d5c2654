package jetstream

import (
	"context"
	"errors"
	"fmt"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"strings"
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

// declareReserve creates the reservation stream if it is missing and
// opts.ReserveBytes asks for one. On one that exists it keeps the
// deployed replicas and bound, as every deployed limit (Mismatch), adds
// each difference to found and sets opts.ReserveBytes to the deployed
// bound. (A reservation the configuration no longer asks for is removed
// with the nats CLI: nats stream rm <prefix>_RESERVE.)
func declareReserve(ctx context.Context, js natsjs.JetStream, n Names, opts *Options, found *[]Mismatch) error {
	cfg := reserveConfig(n, *opts)
	st, err := js.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, natsjs.ErrStreamNotFound):
		if opts.ReserveBytes == 0 {
			return nil
		}
		_, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) {
			err = nil // another node created it first
		}
	case err == nil:
		have := st.CachedInfo().Config
		*found = append(*found, keepReserve(have, &cfg, opts.ReserveBytes)...)
		opts.ReserveBytes = cfg.MaxBytes
		if have.Description != cfg.Description {
			_, err = js.UpdateStream(ctx, cfg)
		}
	}
	if StorageTooSmall(err) {
		return fmt.Errorf("%d bytes for the task queue and buckets cannot be reserved on the JetStream servers (%w): lower media.reserve_bytes, or give JetStream more storage (max_file_store)", cfg.MaxBytes, err)
	}
	return err
}

// reserveConfig is the reservation stream as declareReserve creates it.
func reserveConfig(n Names, opts Options) natsjs.StreamConfig {
	return natsjs.StreamConfig{
		Name:        n.ReserveStream,
		Description: "botctl: no messages; its MaxBytes sets aside storage for the task queue and the buckets, so that the media store's bound cannot take it",
		Subjects:    []string{strings.TrimSuffix(n.TaskSubjectPrefix, ".tasks") + ".reserve"},
		Storage:     natsjs.FileStorage,
		Replicas:    opts.Replicas,
		MaxBytes:    opts.ReserveBytes,
		MaxMsgs:     1,
		Discard:     natsjs.DiscardNew,
	}
}

// reserveKeys name the configuration keys of the reservation's settings.
var reserveKeys = map[string]string{"replicas": "nats.replicas", "max-bytes": "media.reserve_bytes"}

// keepReserve is keepStream for the reservation stream. A reserve of
// zero (media.reserve_bytes 0) asks for no reservation: with one
// deployed, that is a mismatch of its bound, the deployed one kept.
func keepReserve(have natsjs.StreamConfig, want *natsjs.StreamConfig, reserve int64) []Mismatch {
	if reserve > 0 {
		return keepStream(have, want, reserveKeys)
	}
	want.MaxBytes = have.MaxBytes
	found := keepStream(have, want, reserveKeys)
	return append(found, Mismatch{Stream: have.Name, Setting: "max-bytes", Key: reserveKeys["max-bytes"], Deployed: fmt.Sprint(have.MaxBytes), Wanted: "0"})
}
