package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// diskFullNATS gives JetStream little storage and lets media fill it, as
// a deployment sized with media.reserve_bytes would be:
//
//  1. the media store's bound set to bound and the reservation stream's
//     (media.reserve_bytes, 1 GiB by default) to reserve (`nats stream
//     edit`), so that the servers can start with little storage;
//  2. the NATS servers restarted one by one with max_file_store = store
//     (each waited for until its replicas are current);
//  3. the nodes restarted one by one with media.max_store_bytes = bound
//     and media.reserve_bytes = reserve, as deployed (bound + reserve ≤
//     store: JetStream sets both aside);
//  4. files flooded in (floodMedia) until the media store refuses them:
//     the servers' storage is then as full as media can make it, and the
//     task queue and buckets must go on in what is left (the steady
//     users' text is judged as always), each refused file told.
//
// Everything is put back after (nodes, reservation, servers, bound).
func (h *Harness) diskFullNATS(r *RoundResult, store, bound, reserve int64, size, convs int, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	was, err := h.setMediaBound(ctx, bound)
	if err != nil {
		return err
	}
	defer func() {
		if _, err := h.setMediaBound(context.Background(), was); err != nil {
			r.note("media bound not put back: %v", err)
		}
	}()
	wasReserve, err := h.setStreamBound(ctx, jetstream.NamesFor("").ReserveStream, reserve)
	if err != nil {
		return err
	}
	defer func() {
		if _, err := h.setStreamBound(context.Background(), jetstream.NamesFor("").ReserveStream, wasReserve); err != nil {
			r.note("reservation's bound not put back: %v", err)
		}
	}()
	if err := h.restartNATSWith(r, []string{"-max-file-store", strconv.FormatInt(store, 10)}); err != nil {
		return err
	}
	defer func() {
		if err := h.restartNATSWith(r, nil); err != nil {
			r.note("NATS servers not restarted with their usual storage: %v", err)
		}
	}()
	if err := h.restartNodesWith(r, []string{"--media-max-store-bytes=" + strconv.FormatInt(bound, 10),
		"--media-reserve-bytes=" + strconv.FormatInt(reserve, 10)}); err != nil {
		return err
	}
	defer func() {
		if err := h.restartNodesWith(r, nil); err != nil {
			r.note("nodes not restarted with their usual flags: %v", err)
		}
	}()
	r.note("JetStream storage %d bytes a server, media bound %d, reserved for the queue and buckets %d (was %d)", store, bound, reserve, wasReserve)
	full, sent := h.floodMedia(r, size, convs, d)
	used, err := h.storeUsed(ctx)
	r.note("%d of %d files refused as storage full; JetStream storage used after the flood: %d of %d bytes (%v)", full, sent, used, store, err)
	if full == 0 {
		return fmt.Errorf("no file was refused as storage full: the flood never filled the media store")
	}
	return nil
}

// restartNATSWith restarts the NATS servers one by one with extra added
// to their arguments (nil: their usual ones), each waited for until every
// replica is current again.
func (h *Harness) restartNATSWith(r *RoundResult, extra []string) error {
	for _, m := range h.Infra.NATS {
		if err := h.Infra.Stop(m, 30*time.Second); err != nil {
			return err
		}
		if i := slices.Index(m.Args, "-max-file-store"); i >= 0 {
			m.Args = slices.Delete(m.Args, i, i+2)
		}
		m.Args = append(m.Args, extra...)
		if err := h.Infra.Restart(m, time.Minute); err != nil {
			return fmt.Errorf("restart %s: %w", m.Name, err)
		}
		if err := h.waitReplicasCurrent(2 * time.Minute); err != nil {
			return fmt.Errorf("after restarting %s: %w", m.Name, err)
		}
	}
	r.note("NATS servers restarted with %q added to their arguments", extra)
	return nil
}

// setStreamBound sets stream's MaxBytes (an operator's `nats stream
// edit`) and returns the one it had.
func (h *Harness) setStreamBound(ctx context.Context, stream string, bound int64) (int64, error) {
	nc, err := nats.Connect(h.Infra.NATSURLs(), nats.Name("chaos-bound"))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return 0, err
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	cfg := st.CachedInfo().Config
	was := cfg.MaxBytes
	cfg.MaxBytes = bound
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return was, fmt.Errorf("%s's MaxBytes to %d: %w", stream, bound, err)
	}
	return was, nil
}

// storeUsed is the account's JetStream file storage in use (every
// replica counted once, as JetStream reports it).
func (h *Harness) storeUsed(ctx context.Context) (uint64, error) {
	js, _, done, err := h.mediaStream(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	ai, err := js.AccountInfo(ctx)
	if err != nil {
		return 0, err
	}
	return ai.Store, nil
}
