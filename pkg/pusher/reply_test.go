package pusher_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"image"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/natscount"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/pusher"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
)

func smallPNG() []byte {
	var b bytes.Buffer
	_ = png.Encode(&b, image.NewGray(image.Rect(0, 0, 8, 8)))
	return b.Bytes()
}

// writeReply plays a worker whose answer is text with a reply: each
// object's bytes stored in the media store, then the output and Finish.
func (r *rig) writeReply(id, text string, images [][]byte, files [][]byte, card string) {
	r.t.Helper()
	ctx := context.Background()
	rec := r.record(id)
	attempt, _, err := r.lc.Start(ctx, task.MessageOf(rec), "queue", 1)
	if err != nil {
		r.t.Fatal(err)
	}
	var reply task.Reply
	n := 0
	put := func(kind, name string, data []byte) task.ReplyObject {
		key := task.ReplyKey(id, attempt, n)
		n++
		if _, err := r.js.Store.Media().PutBytes(ctx, key, data); err != nil {
			r.t.Fatal(err)
		}
		sum := md5.Sum(data)
		return task.ReplyObject{Kind: kind, Name: name, Size: int64(len(data)), MD5: hex.EncodeToString(sum[:]), Key: key}
	}
	for _, b := range images {
		reply.Images = append(reply.Images, put("image", "i.png", b))
	}
	for _, b := range files {
		reply.Files = append(reply.Files, put("file", "f.txt", b))
	}
	if card != "" {
		reply.Card = json.RawMessage(card)
	}
	w := r.lc.Output(id, "b", attempt)
	w.SetReply(&reply)
	if err := w.Write(ctx, text); err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.lc.Finish(ctx, id, attempt, text); err != nil {
		r.t.Fatal(err)
	}
}

const testCard = `{"card_type":"button_interaction","task_id":"x","main_title":{"title":"t"},"button_list":[{"text":"ok","key":"k"}]}`

// The final frame carries the images (msg_item) and the card
// (stream_with_template_card); a file of more than 10 chunks is uploaded
// with at most 2 chunks in flight (the simulator refuses a third while
// acks are late) and pushed as a file message.
func TestReplyImagesCardOnFinalFrameAndFileUploaded(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	big := bytes.Repeat([]byte("0123456789abcdef"), 12*wecom.MaxUploadChunkBytes/16-7) // 12 chunks
	if err := r.sim.Fault(wecomsim.FaultRequest{BotID: "b", Action: "late_acks", Seconds: 60, DelaySeconds: 0.2}); err != nil {
		t.Fatal(err)
	}
	r.writeReply(rec.ID, "Here it is.", [][]byte{smallPNG(), smallPNG()}, [][]byte{big}, testCard)
	r.waitDelivery(rec.ID, task.Delivered)
	bot := r.botMessages("alice")
	if len(bot) != 2 || bot[0].Content != "Here it is." || !bot[0].Finished || bot[0].Images != 2 || !strings.Contains(bot[0].Card, `"button_interaction"`) ||
		bot[1].Kind != "file" || !bot[1].Finished {
		t.Fatalf("user sees %+v", bot)
	}
	if s := r.stats(); s.Errors["40058"] != 0 {
		t.Fatalf("frames refused: %+v", s)
	}
	if st := r.p.Stats(); st.Uploads != 1 {
		t.Fatalf("uploads %d", st.Uploads)
	}
}

// After a failover the new leader cannot use the old stream: the whole
// reply is pushed, in the answer's order: text, images (uploaded), card,
// files.
func TestReplyPushedAfterFailover(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	r.stop() // the leader dies before the answer
	r.connect(2)
	r.writeReply(rec.ID, "Late but whole.", [][]byte{smallPNG()}, [][]byte{[]byte("a small file")}, testCard)
	r.start(pusher.Config{})
	r.waitDelivery(rec.ID, task.Delivered)
	var kinds []string
	for _, m := range r.botMessages("alice") {
		kinds = append(kinds, m.Kind)
	}
	if got := strings.Join(kinds, ","); got != "stream,markdown,image,template_card,file" {
		t.Fatalf("user sees %s: %+v", got, r.botMessages("alice"))
	}
	if s := r.stats(); s.Errors["40058"] != 0 || s.InvalidReqIDs != 0 {
		t.Fatalf("frames refused: %+v", s)
	}
}

// noisePNG is a PNG of w×w random pixels: about 4·w² bytes, incompressible.
func noisePNG(w int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, w))
	x := uint32(2463534242)
	for i := range img.Pix {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		img.Pix[i] = byte(x)
	}
	var b bytes.Buffer
	_ = png.Encode(&b, img)
	return b.Bytes()
}

// Images too large for one frame together (the frame limit, 1 MiB) are
// not sent in a broken frame: the final frame carries the text, the
// image is uploaded and sent after it.
func TestReplyImageTooLargeForTheFrameIsUploaded(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	rec := r.ask("alice", "hi")
	big := noisePNG(460)
	if len(big)*4/3 < wecom.MaxFrameBytes-64<<10 {
		t.Fatalf("the test image is %d bytes: too small to overflow a frame", len(big))
	}
	r.writeReply(rec.ID, "A big picture.", [][]byte{big}, nil, "")
	r.waitDelivery(rec.ID, task.Delivered)
	bot := r.botMessages("alice")
	if len(bot) != 2 || bot[0].Content != "A big picture." || bot[0].Images != 0 || bot[1].Kind != "image" || len(bot[1].ImageIDs) != 1 {
		t.Fatalf("user sees %+v", bot)
	}
	if s := r.stats(); s.Errors["40058"] != 0 || s.Oversized != 0 {
		t.Fatalf("frames refused: %+v", s)
	}
}

// An upload WeCom refuses for the bot's upload cap (45009) is not a
// failure of the task: the bot's upload budget is lowered and the file
// goes when the cap allows.
func TestReplyUploadOverTheCapWaits(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{UploadRateLimit: 1, RateWindow: 2 * time.Second})
	r.start(pusher.Config{Uploads: pace.New(30, 2*time.Second, nil)})
	rec := r.ask("alice", "hi")
	r.writeReply(rec.ID, "Two files.", nil, [][]byte{[]byte("one"), []byte("two")}, "")
	r.waitDelivery(rec.ID, task.Delivered)
	var files int
	for _, m := range r.botMessages("alice") {
		if m.Kind == "file" {
			files++
		}
	}
	if s := r.stats(); files != 2 || s.QuotaRejections == 0 || r.record(rec.ID).PushAttempts != 0 {
		t.Fatalf("files %d, quota rejections %d, push attempts %d", files, s.QuotaRejections, r.record(rec.ID).PushAttempts)
	}
}

// A succeeded answer's copy read from the progress bucket (its attempt's
// last write not in the output bucket at that read) is not taken for the
// last write: a step that must wait reads again, and the final frame
// carries what the last write brings (here an image). Fails when the
// copy is kept as the output bucket's (checked).
func TestAnswerFromTheProgressBucketIsReadAgain(t *testing.T) {
	t.Parallel()
	r := newClockRig(t)
	ctx := context.Background()
	if err := r.version("answer", r.now); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitLong, "the text shown", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == "answer"
	})
	for r.budget.Remaining("alice") > 0 {
		r.budget.Record("alice")
	}
	throttled := r.p.Stats().Throttled
	if _, err := r.lc.Finish(ctx, r.rec.ID, r.attempt, "answer"); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitLong, "the final frame held by the budget", func() bool { return r.p.Stats().Throttled > throttled })

	// The last write comes: the same text, and an image.
	img := smallPNG()
	key := task.ReplyKey(r.rec.ID, r.attempt, 0)
	if _, err := r.js.Store.Media().PutBytes(ctx, key, img); err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(img)
	w := r.lc.Output(r.rec.ID, "b", r.attempt)
	w.SetReply(&task.Reply{Images: []task.ReplyObject{{Kind: "image", Name: "i.png", Size: int64(len(img)), MD5: hex.EncodeToString(sum[:]), Key: key}}})
	if err := w.Final(ctx, "answer"); err != nil {
		t.Fatal(err)
	}
	r.ahead.Store(int64(time.Minute + time.Second)) // the budget's window passes
	r.waitDelivery(r.rec.ID, task.Delivered)
	if bot := r.botMessages("alice"); len(bot) != 1 || bot[0].Content != "answer" || !bot[0].Finished || bot[0].Images != 1 {
		t.Fatalf("user sees %+v, want the answer with its image", bot)
	}
}

// Once a task's delivery is final its files leave the media store: the
// user's (the record's attachments) and its reply's images and files.
// Another task's stay.
func TestDeliveredTaskMediaDeleted(t *testing.T) {
	t.Parallel()
	r := newRig(t, wecomsim.Config{})
	r.start(pusher.Config{})
	ctx := context.Background()
	obs := r.js.Store.Media()
	// The message's id is known only once it arrives: the user's file
	// is stored under a key of the test's, as the record names it.
	for _, key := range []string{"user-file/0", "another-task/0"} {
		if _, err := obs.PutBytes(ctx, key, []byte("the user's csv")); err != nil {
			t.Fatal(err)
		}
	}
	rec := r.askWithFiles("alice", "what is in it?", []task.Attachment{{Kind: "file", Name: "a.csv", Size: 14, Key: "user-file/0"}})
	r.writeReply(rec.ID, "Here it is.", [][]byte{smallPNG()}, [][]byte{[]byte("a small file")}, "")
	r.waitDelivery(rec.ID, task.Delivered)
	gone := []string{"user-file/0", task.ReplyKey(rec.ID, 1, 0), task.ReplyKey(rec.ID, 1, 1)}
	testwait.Eventually(t, waitLong, "the delivered task's files deleted", func() bool {
		for _, key := range gone {
			if _, err := obs.GetInfo(ctx, key); err == nil {
				return false
			}
		}
		return true
	})
	if _, err := obs.GetInfo(ctx, "another-task/0"); err != nil {
		t.Fatalf("another task's file: %v", err)
	}
	if kinds := r.botMessages("alice"); len(kinds) != 2 || kinds[0].Images != 1 || kinds[1].Kind != "file" {
		t.Fatalf("user sees %+v", kinds)
	}
}

// mediaReads counts the reads of the media store (an object's info, the
// consumer of its chunks) that the store's connection sends, in order.
func (r *rig) mediaReads() *natscount.Counter {
	r.t.Helper()
	st, err := r.js.Store.Media().Status(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	stream := "OBJ_" + st.Bucket()
	subjects := []string{"$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>", "$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.CONSUMER.CREATE." + stream, "$JS.API.CONSUMER.CREATE." + stream + ".>"}
	return natscount.New(r.t, r.js.Conn, r.js.Conn, subjects, nil)
}

// finishWithReply plays the clock rig's worker: obj stored under the
// attempt's first reply key, the task finished with text and a reply of
// it (an image, or a file).
func (r *clockRig) finishWithReply(text, kind string, obj []byte) {
	r.t.Helper()
	ctx := context.Background()
	key := task.ReplyKey(r.rec.ID, r.attempt, 0)
	if _, err := r.js.Store.Media().PutBytes(ctx, key, obj); err != nil {
		r.t.Fatal(err)
	}
	sum := md5.Sum(obj)
	o := task.ReplyObject{Kind: kind, Name: "x." + kind, Size: int64(len(obj)), MD5: hex.EncodeToString(sum[:]), Key: key}
	var reply task.Reply
	if kind == "image" {
		reply.Images = []task.ReplyObject{o}
	} else {
		reply.Files = []task.ReplyObject{o}
	}
	if _, err := r.lc.Finish(ctx, r.rec.ID, r.attempt, text); err != nil {
		r.t.Fatal(err)
	}
	w := r.lc.Output(r.rec.ID, "b", r.attempt)
	w.SetReply(&reply)
	if err := w.Final(ctx, text); err != nil {
		r.t.Fatal(err)
	}
}

// A final frame held back by its conversation's spent send budget reads
// none of its reply's images meanwhile: they are read when the budget
// lets the frame go, and the frame carries them.
func TestFinalFrameHeldByTheBudgetReadsNoImage(t *testing.T) {
	t.Parallel()
	r := newClockRig(t)
	reads := r.mediaReads()
	for r.budget.Remaining("alice") > 0 {
		r.budget.Record("alice")
	}
	throttled := r.p.Stats().Throttled
	r.finishWithReply("answer", "image", smallPNG())
	reads.Reset() // the test's own store of the image
	testwait.Eventually(t, waitLong, "the final frame held by the budget", func() bool { return r.p.Stats().Throttled > throttled })
	if n := reads.Load(); n != 0 {
		t.Fatalf("%d reads of the media store while the final frame could not be sent", n)
	}
	r.ahead.Store(int64(time.Minute + time.Second)) // the budget's window passes
	r.waitDelivery(r.rec.ID, task.Delivered)
	if bot := r.botMessages("alice"); len(bot) != 1 || bot[0].Content != "answer" || bot[0].Images != 1 {
		t.Fatalf("user sees %+v, want the answer with its image", bot)
	}
	if reads.Load() == 0 {
		t.Fatal("the image was sent without a read of the media store: the count sees nothing")
	}
}

// A reply's file held back by the bot's spent upload budget is not read
// from the media store meanwhile: it is read, uploaded and sent once the
// budget allows the upload.
func TestFileHeldByTheUploadBudgetIsNotRead(t *testing.T) {
	t.Parallel()
	var uploads *pace.Budget
	r := newClockRigWith(t, func(now func() time.Time) pusher.Config {
		uploads = pace.New(1, time.Minute, now)
		return pusher.Config{Uploads: uploads}
	})
	uploads.Record("b") // the minute's one upload, spent
	reads := r.mediaReads()
	throttled := r.p.Stats().Throttled
	r.finishWithReply("a file for you", "file", []byte("the file's bytes"))
	reads.Reset()
	testwait.Eventually(t, waitLong, "the file held by the upload budget", func() bool {
		bot := r.botMessages("alice")
		return len(bot) == 1 && bot[0].Content == "a file for you" && bot[0].Finished && r.p.Stats().Throttled > throttled
	})
	if n := reads.Load(); n != 0 {
		t.Fatalf("%d reads of the media store while the file could not be uploaded", n)
	}
	r.ahead.Store(int64(time.Minute + time.Second)) // the upload budget's window passes
	r.waitDelivery(r.rec.ID, task.Delivered)
	if bot := r.botMessages("alice"); len(bot) != 2 || bot[1].Kind != "file" || !bot[1].Finished {
		t.Fatalf("user sees %+v, want the answer then its file", bot)
	}
	if st := r.p.Stats(); st.Uploads != 1 || reads.Load() == 0 {
		t.Fatalf("uploads %d, reads %d: want the file read and uploaded once", st.Uploads, reads.Load())
	}
}
