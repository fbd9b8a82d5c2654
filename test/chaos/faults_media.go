package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/test/e2e/cluster"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// mediaStream opens the media object store's stream (OBJ_<bucket>).
func (h *Harness) mediaStream(ctx context.Context) (natsjs.JetStream, natsjs.Stream, func(), error) {
	nc, err := nats.Connect(h.Infra.NATSURLs(), nats.Name("chaos-media"))
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	st, err := js.Stream(ctx, "OBJ_"+jetstream.NamesFor("").MediaBucket)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	return js, st, nc.Close, nil
}

// setMediaBound sets the media stream's MaxBytes (an operator's `nats
// stream edit`; a node never changes a deployed bound) and returns the
// one it had.
func (h *Harness) setMediaBound(ctx context.Context, bound int64) (int64, error) {
	js, st, done, err := h.mediaStream(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	cfg := st.CachedInfo().Config
	was := cfg.MaxBytes
	cfg.MaxBytes = bound
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return was, fmt.Errorf("media stream's MaxBytes to %d: %w", bound, err)
	}
	return was, nil
}

// mediaFlood bounds the media store at bound bytes, then for d posts a
// file of size bytes every second, each from the next of convs flood
// conversations, beside the steady users' text: the store fills to its
// bound and a file past it is refused, its user told storage is full,
// while text keeps flowing (the steady users are judged as always). The
// largest the store got is noted; the round fails unless some file was
// refused. The bound is put back after.
func (h *Harness) mediaFlood(r *RoundResult, bound int64, size, convs int, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
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
	r.note("media store bounded at %d bytes (was %d); a %d-byte file a second for %s over %d conversations", bound, was, size, d, convs)
	_, st, done, err := h.mediaStream(ctx)
	if err != nil {
		return err
	}
	defer done()
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if info, err := st.Info(ctx); err == nil {
				peak = max(peak, info.State.Bytes)
			}
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	full, sent := h.floodMedia(r, size, convs, d)
	close(stop)
	wg.Wait()
	r.note("media store peak %d bytes of its bound %d; %d of %d files refused as storage full (so far)", peak, bound, full, sent)
	if full == 0 {
		return fmt.Errorf("no file was refused as storage full: the flood never filled the media store (peak %d of %d bytes)", peak, bound)
	}
	return nil
}

// floodMedia posts a file of size bytes every second for d, each from
// the next of convs flood conversations, then waits (up to 90 s) until
// some were refused as storage full. It returns how many were, and how
// many files it posted.
func (h *Harness) floodMedia(r *RoundResult, size, convs int, d time.Duration) (full, n int) {
	label := fmt.Sprintf("%s-r%d", r.Scenario, r.Round)
	var sent []*Msg
	var mu sync.Mutex
	var posts sync.WaitGroup
	for k := 0; time.Duration(k)*time.Second < d; k++ {
		posts.Add(1)
		go func() {
			defer posts.Done()
			m := h.Traffic.PostMedia(label, fmt.Sprintf("chaos-%s-f%d", h.Traffic.nonce, k%convs+1), size, "")
			mu.Lock()
			sent = append(sent, m)
			mu.Unlock()
		}()
		time.Sleep(time.Second)
	}
	posts.Wait()
	// The refusals are told at receipt: wait until one is seen.
	deadline := time.Now().Add(90 * time.Second)
	for full == 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Second)
		full = 0
		trs := map[string][]cluster.TranscriptEntry{}
		for _, m := range sent {
			tr, ok := trs[m.User]
			if !ok {
				var err error
				if tr, err = h.C.Transcript(bot, m.User); err != nil {
					continue
				}
				trs[m.User] = tr
			}
			if Judge(tr, m).StorageFull > 0 {
				full++
			}
		}
	}
	return full, len(sent)
}
