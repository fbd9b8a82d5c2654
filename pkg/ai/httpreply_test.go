package ai

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// tinyPNG is a 2×2 PNG (docs/ai.md's example).
const tinyPNG = "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAYAAABytg0kAAAAFElEQVR4nGL6z8DwnwEZAAIAAP//HxcCAa7PZcoAAAAASUVORK5CYII="

// A webhook that streams images without end fails its answer as soon as
// the reply passes what one answer carries (ErrReplyTooLarge, not
// retried): the sink holds at most MaxReplyImages, and the stream stops
// long before the backend's timeout.
func TestHTTPEndlessReplyFailsAtTheLimit(t *testing.T) {
	leakCheck(t)
	s := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
		eventStream(w)
		write(w, `data: {"text": "here:"}`+"\n\n")
		for r.Context().Err() == nil {
			write(w, `data: {"reply": {"images": [{"name": "a.png", "data": "`+tinyPNG+`"}]}}`+"\n\n")
		}
	})
	sink := &ReplySink{}
	b := httpBackendFor(t, s, HTTPConfig{Timeout: 2 * time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := b.Stream(WithReplySink(ctx, sink), question("q"), newRecorder().emit)
	if !errors.Is(err, ErrReplyTooLarge) || !errors.Is(err, ErrBadRequest) || Retryable(err) {
		t.Fatalf("Stream = %v, want ErrReplyTooLarge (an ErrBadRequest, not retried)", err)
	}
	if !strings.Contains(err.Error(), "11 images, at most 10") {
		t.Errorf("error %q does not say what was too much", err)
	}
	if n := len(sink.Reply().Images); n != MaxReplyImages {
		t.Errorf("sink holds %d images, want the %d that fit", n, MaxReplyImages)
	}
}

// The sink refuses what would take a reply past its files or its bytes,
// keeping nothing of it, and keeps taking what fits.
func TestSendReplyBounds(t *testing.T) {
	sink := &ReplySink{}
	ctx := WithReplySink(context.Background(), sink)
	png, _ := base64.StdEncoding.DecodeString(tinyPNG)
	for range MaxReplyFiles {
		if err := SendReply(ctx, Reply{Files: []ReplyFile{{Name: "f", Data: []byte("x")}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := SendReply(ctx, Reply{Files: []ReplyFile{{Name: "f", Data: []byte("x")}}}); !errors.Is(err, ErrReplyTooLarge) {
		t.Errorf("file %d: %v, want ErrReplyTooLarge", MaxReplyFiles+1, err)
	}
	big := Reply{Images: []ReplyFile{{Name: "big.png", Data: make([]byte, MaxReplyBytes)}}}
	if err := SendReply(ctx, big); !errors.Is(err, ErrReplyTooLarge) || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("an image of MaxReplyBytes: %v, want ErrReplyTooLarge about bytes", err)
	}
	if err := SendReply(ctx, Reply{Images: []ReplyFile{{Name: "a.png", Data: png}}}); err != nil {
		t.Errorf("an image that fits after a refusal: %v", err)
	}
	if r := sink.Reply(); len(r.Files) != MaxReplyFiles || len(r.Images) != 1 || len(r.Images[0].Data) != len(png) {
		t.Errorf("sink holds %d files, %d images: want %d and the one that fit", len(r.Files), len(r.Images), MaxReplyFiles)
	}
}

// The webhook can act once per task: Idempotency-Key is the task id on
// every attempt, X-Botctl-Attempt the attempt's number.
func TestHTTPIdempotencyHeaders(t *testing.T) {
	leakCheck(t)
	headers := make(chan http.Header, 4)
	s := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
		headers <- r.Header.Clone()
		w.Header().Set("Content-Type", "text/plain")
		write(w, "ok")
	})
	b := httpBackendFor(t, s, HTTPConfig{})
	for attempt := 1; attempt <= 2; attempt++ {
		req := question("q")
		req.TaskID, req.Attempt = "b1:m-42", attempt
		if err := b.Stream(context.Background(), req, newRecorder().emit); err != nil {
			t.Fatal(err)
		}
		h := <-headers
		if got := h.Get("Idempotency-Key"); got != "b1:m-42" {
			t.Errorf("attempt %d: Idempotency-Key %q, want the task id", attempt, got)
		}
		if got := h.Get("X-Botctl-Attempt"); got != string(rune('0'+attempt)) {
			t.Errorf("attempt %d: X-Botctl-Attempt %q", attempt, got)
		}
	}
}
