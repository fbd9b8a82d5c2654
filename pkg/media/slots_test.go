package media_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/media"
)

// stallServer answers nothing until its client gives up; it counts the
// requests it holds.
func stallServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var held atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held.Add(1)
		defer held.Add(-1)
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv, &held
}

func items(url string, n int) []media.Item {
	out := make([]media.Item, n)
	for i := range out {
		out[i] = media.Item{Kind: "image", URL: url + "/" + strconv.Itoa(i)}
	}
	return out
}

// Two conversations whose downloads stall hold at most their share of
// the node's slots: a third conversation's file is stored while they
// still hang.
func TestStalledConversationsLeaveSlotsToOthers(t *testing.T) {
	obs := store(t)
	stalled, held := stallServer(t)
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("GIF89a")) }))
	defer good.Close()
	f := media.New(media.Config{Parallel: 4, Timeout: 3 * time.Minute, MessageTimeout: 4 * time.Minute})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	hung := make(chan error, 2)
	for _, conv := range []string{"b1/alice", "b1/bob"} {
		wg.Go(func() {
			_, err := f.Fetch(ctx, obs, media.Batch{TaskID: "t_" + conv[3:], Conversation: conv, Items: items(stalled.URL, 4)})
			hung <- err
		})
	}
	defer func() { cancel(); wg.Wait() }()
	testwait.Eventually(t, 30*time.Second, "both stalled conversations downloading", func() bool { return held.Load() >= 2 })

	done := make(chan error, 1)
	go func() {
		_, err := f.Fetch(context.Background(), obs, media.Batch{TaskID: "t_carol", Conversation: "b1/carol", Items: items(good.URL, 1)})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("carol's file: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("carol's file not stored while two conversations' downloads hang (%d held)", held.Load())
	}
	if held.Load() != 2 {
		t.Fatalf("%d stalled downloads at once, want 2 (one per conversation: a quarter of 4 slots)", held.Load())
	}
	select {
	case err := <-hung:
		t.Fatalf("a stalled message ended early: %v", err)
	default:
	}
}

// The message's deadline, counted from its arrival, covers the wait for
// a slot: a message that cannot get one is told it timed out, naming the
// message's limit, instead of waiting for ever.
func TestMessageDeadlineCoversTheWaitForASlot(t *testing.T) {
	obs := store(t)
	stalled, held := stallServer(t)
	f := media.New(media.Config{Parallel: 1, Timeout: 3 * time.Minute, MessageTimeout: 90 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		f.Fetch(ctx, obs, media.Batch{TaskID: "t_a", Conversation: "b1/alice", Items: items(stalled.URL, 1)})
	})
	defer func() { cancel(); wg.Wait() }()
	testwait.Eventually(t, 30*time.Second, "the only slot taken", func() bool { return held.Load() == 1 })

	// Arrived long ago: its deadline is 2 s away.
	arrived := time.Now().Add(-88 * time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := f.Fetch(context.Background(), obs, media.Batch{TaskID: "t_b", Conversation: "b1/bob", Arrived: arrived, Items: items(stalled.URL, 1)})
		done <- err
	}()
	select {
	case err := <-done:
		var me *media.Error
		if !errors.As(err, &me) || me.Reason != media.ReasonTimeout || !strings.Contains(me.Reply(), "1m30s") {
			t.Fatalf("err %v (reply %q), want a timeout naming the message's 1m30s", err, replyOf(me))
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a message waiting for a slot past its deadline was not given up")
	}
}

// A message's files are downloaded at once (up to its conversation's
// share): a server that answers only when it holds all three requests
// together serves them.
func TestAMessagesFilesDownloadTogether(t *testing.T) {
	obs := store(t)
	var seen atomic.Int64
	all := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen.Add(1) == 3 {
			close(all)
		}
		select {
		case <-all:
			w.Write([]byte("GIF89a"))
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	f := media.New(media.Config{Parallel: 12, Timeout: 20 * time.Second})
	atts, err := f.Fetch(context.Background(), obs, media.Batch{TaskID: "t_three", Conversation: "b1/alice", Items: items(srv.URL, 3)})
	if err != nil {
		t.Fatalf("three files fetched one by one: %v", err)
	}
	for i, a := range atts {
		if a.Key != "t_three/"+strconv.Itoa(i) {
			t.Fatalf("attachment %d is %+v: want the items' order", i, a)
		}
	}
}
