package worker_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"image"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/worker"
)

// replyBackend answers "ok" and sends reply with it.
type replyBackend struct{ reply ai.Reply }

func (replyBackend) Name() string { return "reply-test" }
func (b replyBackend) Stream(ctx context.Context, req ai.Request, emit func(string) error) error {
	if err := emit("ok"); err != nil {
		return err
	}
	return ai.SendReply(ctx, b.reply)
}

func pngOf(w int) []byte {
	var b bytes.Buffer
	_ = png.Encode(&b, image.NewGray(image.Rect(0, 0, w, w)))
	return b.Bytes()
}

// A reply WeCom would refuse is not sent broken: a GIF, an image over
// 10 MB and a card that is not an object are left out (an 11th image
// fails the answer: ai.ErrReplyTooLarge),
// the answer says so, and what is valid is stored and named in the
// output (with its md5) for the pusher.
func TestReplyBadItemsLeftOutWithANote(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{})
	var images []ai.ReplyFile
	images = append(images, ai.ReplyFile{Name: "a.gif", Data: []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;")})
	images = append(images, ai.ReplyFile{Name: "huge.png", Data: append(pngOf(4), make([]byte, ai.MaxReplyImageBytes)...)})
	for range 8 {
		images = append(images, ai.ReplyFile{Data: pngOf(4)})
	}
	b := replyBackend{ai.Reply{Images: images, Files: []ai.ReplyFile{{Name: "n.txt", Data: []byte("notes")}}, Card: []byte(`[1]`)}}
	run(t, env.Store, "w1", b)
	m := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "alice", Question: "q", Received: time.Now()}
	publishMessage(t, env.Store, m)
	testwait.Eventually(t, waitLong, "succeeded", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	o := answer(env.Store, m.TaskID)
	for _, want := range []string{"ok\n\n（部分内容未能发送：", "a.gif 不是 JPG 或 PNG 格式", "huge.png 超过 10 MB", "卡片格式无效"} {
		if !strings.Contains(o.Text, want) {
			t.Errorf("answer %q: no %q", o.Text, want)
		}
	}
	if o.Reply == nil || len(o.Reply.Images) != 8 || len(o.Reply.Files) != 1 || o.Reply.Card != nil {
		t.Fatalf("reply %+v", o.Reply)
	}
	got, err := env.Store.Media().GetBytes(context.Background(), o.Reply.Files[0].Key)
	sum := md5.Sum([]byte("notes"))
	if err != nil || string(got) != "notes" || o.Reply.Files[0].MD5 != hex.EncodeToString(sum[:]) {
		t.Fatalf("stored file %q, %v", got, err)
	}
	if r := record(t, env.Store, m.TaskID); r.AnswerHash != task.Hash(o.Text) {
		t.Fatal("the recorded answer is not the text with its note")
	}
}

// A reply's image or file the media store refuses for its bound
// (media.max_store_bytes) is left out with a note, and what fits is
// stored: the answer is delivered, not retried until the store empties.
func TestReplyOverAFullStoreLeftOutWithANote(t *testing.T) {
	t.Parallel()
	env := testenv.StartJetStream(t, jetstream.Options{MediaMaxBytes: 64 << 10})
	b := replyBackend{ai.Reply{
		Images: []ai.ReplyFile{{Name: "small.png", Data: pngOf(4)}},
		Files:  []ai.ReplyFile{{Name: "big.bin", Data: make([]byte, 100<<10)}},
	}}
	run(t, env.Store, "w1", b)
	m := task.Message{TaskID: task.ID("b", "m1"), Bot: "b", MsgID: "m1", Chat: "alice", Question: "q", Received: time.Now()}
	publishMessage(t, env.Store, m)
	testwait.Eventually(t, waitLong, "succeeded", func() bool { return record(t, env.Store, m.TaskID).Exec == task.Succeeded })
	if r := record(t, env.Store, m.TaskID); r.Attempt != 1 {
		t.Fatalf("attempt %d, want the first to succeed", r.Attempt)
	}
	o := answer(env.Store, m.TaskID)
	if !strings.Contains(o.Text, "big.bin 未能保存（存储空间已满）") {
		t.Errorf("answer %q: no note of the file left out", o.Text)
	}
	if o.Reply == nil || len(o.Reply.Images) != 1 || len(o.Reply.Files) != 0 {
		t.Fatalf("reply %+v, want the image alone", o.Reply)
	}
	if _, err := env.Store.Media().GetInfo(context.Background(), task.ReplyKey(m.TaskID, 1, 1)); err == nil {
		t.Fatal("the refused file's name is stored")
	}
}

// A reply stored by an attempt that is not delivered (its answer could
// not be stored: the output bucket does not answer) leaves the media
// store with the attempt: each attempt stores its own under its own keys,
// and the store does not keep the others' for media.ttl.
func TestUndeliveredAttemptsReplyDeleted(t *testing.T) {
	t.Parallel()
	fault := testenv.StartBucketFault(t)
	opts := jetstream.Options{TaskMaxDeliver: 2}
	_, botctl := fault.Store(t, fault.URL, opts)
	_, probe := fault.Store(t, fault.ProbeURL, opts)
	fault.Fail(t, probe.Names().OutputBucket)
	b := replyBackend{ai.Reply{Images: []ai.ReplyFile{{Name: "a.png", Data: pngOf(4)}}}}
	runWith(t, worker.Config{NodeID: "w1", Backend: b, Store: botctl, StorePatience: 300 * time.Millisecond})
	m := publish(t, probe, "m1", "alice", "q")
	testwait.Eventually(t, 2*time.Minute, "the task failed for its unstorable answer", func() bool {
		r := record(t, probe, m.TaskID)
		return r.Exec == task.Failed && r.Attempt >= 2
	})
	r := record(t, probe, m.TaskID)
	for a := 1; a <= r.Attempt; a++ {
		if _, err := probe.Media().GetInfo(context.Background(), task.ReplyKey(m.TaskID, a, 0)); err == nil {
			t.Errorf("attempt %d's reply image is still stored", a)
		}
	}
}
