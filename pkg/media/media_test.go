package media_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/media"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/botctl/botctl/pkg/wecomsim"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// sim is a simulator whose media URLs point at its test server.
type sim struct {
	srv *wecomsim.Server
	ts  *httptest.Server
}

func newSim(t *testing.T, cfg wecomsim.Config) *sim {
	t.Helper()
	// The media base must be known before the server starts: take a
	// listener first.
	ts := httptest.NewUnstartedServer(nil)
	cfg.MediaBaseURL = "http://" + ts.Listener.Addr().String()
	srv := wecomsim.New(cfg)
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(func() { ts.Close(); srv.Close() })
	if err := srv.AddBot("b1", "s1"); err != nil {
		t.Fatal(err)
	}
	return &sim{srv: srv, ts: ts}
}

// callback is the callback the simulator would send for req, read back
// through a subscribed connection.
func (s *sim) callback(t *testing.T, req wecomsim.MessageRequest) wecom.MsgCallback {
	t.Helper()
	got := make(chan wecom.MsgCallback, 1)
	c, err := wecom.Dial(context.Background(), wecom.Config{URL: "ws" + strings.TrimPrefix(s.ts.URL, "http"), BotID: "b1", Secret: "s1"},
		wecom.MessageFunc(func(_ *wecom.Conn, _ string, m *wecom.MsgCallback) { got <- *m }))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.Close(); <-c.Done() }()
	req.BotID, req.UserID = "b1", "alice"
	if _, err := s.srv.PostMessage(req); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no callback")
	}
	return wecom.MsgCallback{}
}

func store(t *testing.T) natsjs.ObjectStore {
	return testenv.StartJetStream(t, jetstream.Options{}).Store.Media()
}

func TestFetchStoresDecryptedFilesAndMaterializeCopiesThem(t *testing.T) {
	s := newSim(t, wecomsim.Config{})
	obs := store(t)
	csv := []byte("a,b\n1,2\n")
	m := s.callback(t, wecomsim.MessageRequest{MsgType: "mixed", Items: []wecomsim.MixedPart{
		{MsgType: "text", Text: "look"}, {MsgType: "image", MediaPart: wecomsim.MediaPart{Width: 40, Height: 30}}},
		Quote: &wecomsim.QuotePart{MsgType: "file", MediaPart: wecomsim.MediaPart{ContentBase64: base64.StdEncoding.EncodeToString(csv), Filename: "表.csv"}}})
	items := media.Items(&m)
	if len(items) != 2 || items[0].Kind != "image" || items[1].Kind != "file" || !items[1].Quoted {
		t.Fatalf("items %+v", items)
	}
	f := media.New(media.Config{})
	atts, err := f.Fetch(context.Background(), obs, media.Batch{TaskID: "t_1", Items: items})
	if err != nil {
		t.Fatal(err)
	}
	img, file := atts[0], atts[1]
	if img.Kind != "image" || img.MIME != "image/png" || img.Width != 40 || img.Height != 30 || img.Name != "image.png" || img.Key != "t_1/0" {
		t.Fatalf("image %+v", img)
	}
	if file.Name != "表.csv" || file.Size != int64(len(csv)) || !strings.HasPrefix(file.MIME, "text/") || !file.Quoted {
		t.Fatalf("file %+v", file)
	}
	paths, cleanup, err := media.Materialize(context.Background(), obs, t.TempDir(), "t_1", atts)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(paths[1]); !bytes.Equal(got, csv) {
		t.Fatalf("file copied as %q", got)
	}
	cleanup()
	if _, err := os.Stat(paths[0]); !os.IsNotExist(err) {
		t.Fatalf("cleanup left %s: %v", paths[0], err)
	}
	// Gone from the store: ErrGone once ReadAgainFor has passed, nothing
	// left behind.
	if err := obs.Delete(context.Background(), "t_1/0"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := media.Materialize(context.Background(), obs, t.TempDir(), "t_1", atts); !errors.Is(err, media.ErrGone) {
		t.Fatalf("materialize of a deleted object: %v", err)
	}
}

// An attachment the store answers as missing is read again for
// ReadAgainFor: one that appears meanwhile (a replica catching up) is
// read, not taken as gone.
func TestMaterializeReadsAgainAnObjectNotYetThere(t *testing.T) {
	obs := store(t)
	atts := []task.Attachment{{Kind: "file", Name: "late.txt", Key: "t_2/0"}}
	type result struct {
		paths []string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		paths, _, err := media.Materialize(context.Background(), obs, t.TempDir(), "t_2", atts)
		done <- result{paths, err}
	}()
	time.Sleep(500 * time.Millisecond)
	if _, err := obs.PutBytes(context.Background(), "t_2/0", []byte("late")); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("an object stored 0.5 s after the read began: %v", r.err)
		}
		if got, _ := os.ReadFile(r.paths[0]); string(got) != "late" {
			t.Fatalf("read %q", got)
		}
	case <-time.After(time.Minute):
		t.Fatal("materialize did not return")
	}
}

// Every kind of bad media is an *Error with a reason and a reply, and
// leaves nothing in the store.
func TestFetchFailuresSayWhy(t *testing.T) {
	clock := struct{ now time.Time }{time.Now()}
	s := newSim(t, wecomsim.Config{Now: func() time.Time { return clock.now }})
	obs := store(t)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	}))
	defer slow.Close()

	f := media.New(media.Config{MaxBytes: 4096, Timeout: 2 * time.Second})
	cases := []struct {
		name   string
		req    wecomsim.MessageRequest
		edit   func(*wecom.MsgCallback)
		reason media.Reason
		reply  string
	}{
		{"too big", wecomsim.MessageRequest{MsgType: "file", MediaPart: wecomsim.MediaPart{Size: 5000}}, nil, media.ReasonTooBig, "4 KB"},
		{"bad aeskey", wecomsim.MessageRequest{MsgType: "file", MediaPart: wecomsim.MediaPart{Fault: "aeskey"}}, nil, media.ReasonCorrupt, "无法解密"},
		{"short key", wecomsim.MessageRequest{MsgType: "image", MediaPart: wecomsim.MediaPart{Fault: "short_key"}}, nil, media.ReasonCorrupt, "图片"},
		{"bad padding", wecomsim.MessageRequest{MsgType: "video", MediaPart: wecomsim.MediaPart{Fault: "padding"}}, nil, media.ReasonCorrupt, "视频"},
		{"truncated", wecomsim.MessageRequest{MsgType: "file", MediaPart: wecomsim.MediaPart{Fault: "truncate"}}, nil, media.ReasonCorrupt, "无法解密"},
		{"bad url", wecomsim.MessageRequest{MsgType: "file", MediaPart: wecomsim.MediaPart{Fault: "url"}}, nil, media.ReasonBadURL, "地址无效"},
		{"no url", wecomsim.MessageRequest{MsgType: "image"}, func(m *wecom.MsgCallback) { m.Image = nil }, media.ReasonBadURL, "地址无效"},
		{"gone", wecomsim.MessageRequest{MsgType: "file", MediaPart: wecomsim.MediaPart{Fault: "gone"}}, nil, media.ReasonExpired, "已失效"},
		{"expired", wecomsim.MessageRequest{MsgType: "image"}, func(*wecom.MsgCallback) { clock.now = clock.now.Add(wecomsim.DefaultMediaLifetime) }, media.ReasonExpired, "已失效"},
		{"slow", wecomsim.MessageRequest{MsgType: "file"}, func(m *wecom.MsgCallback) { m.File.URL = slow.URL }, media.ReasonTimeout, "2s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := s.callback(t, c.req)
			if c.edit != nil {
				c.edit(&m)
			}
			// A good image first: a failure removes what was stored.
			good := s.callback(t, wecomsim.MessageRequest{MsgType: "image"})
			items := append(media.Items(&good), media.Items(&m)...)
			_, err := f.Fetch(context.Background(), obs, media.Batch{TaskID: "t_" + strings.ReplaceAll(c.name, " ", "_"), Items: items})
			var me *media.Error
			if !errors.As(err, &me) || me.Reason != c.reason || !strings.Contains(me.Reply(), c.reply) {
				t.Fatalf("err %v (reply %q): want reason %s, reply naming %q", err, replyOf(me), c.reason, c.reply)
			}
			if _, err := obs.GetInfo(context.Background(), "t_"+strings.ReplaceAll(c.name, " ", "_")+"/0"); !errors.Is(err, natsjs.ErrObjectNotFound) {
				t.Fatalf("the good image stayed stored: %v", err)
			}
		})
	}
	many := make([]media.Item, media.MaxItems+1)
	for i := range many {
		many[i] = media.Item{Kind: "image"}
	}
	var me *media.Error
	if _, err := f.Fetch(context.Background(), obs, media.Batch{TaskID: "t_many", Items: many}); !errors.As(err, &me) || me.Reason != media.ReasonTooMany {
		t.Fatalf("too many: %v", err)
	}
}

func replyOf(e *media.Error) string {
	if e == nil {
		return ""
	}
	return e.Reply()
}

func TestDecryptIsTheSDKs(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	for _, n := range []int{0, 1, 31, 32, 33, 100} {
		plain := bytes.Repeat([]byte("p"), n)
		body := wecomsim.EncryptMedia(key, plain)
		if len(body)%32 != 0 || len(body) <= n {
			t.Fatalf("%d bytes encrypted to %d", n, len(body))
		}
		for _, k := range []string{base64.StdEncoding.EncodeToString(key), base64.RawStdEncoding.EncodeToString(key)} {
			got, err := media.Decrypt(body, k)
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("%d bytes, key %q: %q %v", n, k, got, err)
			}
		}
	}
	if _, err := media.Decrypt([]byte("x"), "bad"); !errors.Is(err, media.ErrBadKey) {
		t.Fatal(err)
	}
	if _, err := media.Decrypt(make([]byte, 17), base64.StdEncoding.EncodeToString(key)); !errors.Is(err, media.ErrBadLength) {
		t.Fatal(err)
	}
}

// An item without an aeskey is taken as it comes, as the SDK's
// downloadFile does (WeCom sends keys in long-connection mode only).
func TestFetchWithoutAESKeyTakesTheBytesAsSent(t *testing.T) {
	obs := store(t)
	raw := []byte("GIF89a plain bytes")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(raw) }))
	defer srv.Close()
	atts, err := media.New(media.Config{}).Fetch(context.Background(), obs, media.Batch{TaskID: "t_raw", Items: []media.Item{{Kind: "image", URL: srv.URL + "/x.gif"}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := obs.GetBytes(context.Background(), atts[0].Key)
	if err != nil || !bytes.Equal(got, raw) || atts[0].MIME != "image/gif" || atts[0].Name != "image-1.gif" {
		t.Fatalf("stored %q %v as %+v", got, err, atts[0])
	}
}

// A file the media store refuses for its bound (media.max_store_bytes)
// is ReasonFull, its user told storage is full, and nothing of its
// message stays stored: not the files before it, not its own name. A file
// that fits is taken as before.
func TestFetchIntoAFullStoreSaysSo(t *testing.T) {
	s := newSim(t, wecomsim.Config{})
	env := testenv.StartJetStream(t, jetstream.Options{MediaMaxBytes: 64 << 10})
	obs := env.Store.Media()
	f := media.New(media.Config{MaxBytes: 1 << 20})
	ctx := context.Background()

	small := s.callback(t, wecomsim.MessageRequest{MsgType: "image"})
	big := s.callback(t, wecomsim.MessageRequest{MsgType: "file", MediaPart: wecomsim.MediaPart{Size: 100 << 10}})
	_, err := f.Fetch(ctx, obs, media.Batch{TaskID: "t_full", Items: append(media.Items(&small), media.Items(&big)...)})
	var me *media.Error
	if !errors.As(err, &me) || me.Reason != media.ReasonFull || !strings.Contains(me.Reply(), "存储空间已满") {
		t.Fatalf("a file past the store's bound: %v (reply %q), want %s saying storage is full", err, replyOf(me), media.ReasonFull)
	}
	if _, err := obs.GetInfo(ctx, "t_full/1"); !errors.Is(err, natsjs.ErrObjectNotFound) {
		t.Fatalf("the refused file's name stayed stored: %v", err)
	}
	objs, err := obs.List(ctx)
	if err != nil && !errors.Is(err, natsjs.ErrNoObjectsFound) {
		t.Fatal(err)
	}
	if len(objs) != 0 {
		t.Fatalf("%d objects stored after the refusal, want none: %+v", len(objs), objs[0])
	}
	if _, err := f.Fetch(ctx, obs, media.Batch{TaskID: "t_fits", Items: media.Items(&small)}); err != nil {
		t.Fatalf("a file that fits, after the refusal: %v", err)
	}
}

// A strict policy (WeCom's wss:// connection) refuses the simulator's
// http link, and a file without an aeskey, saying so to the user; the
// message's other files are not kept.
func TestStrictPolicyRefusesWhatWeComNeverSends(t *testing.T) {
	s := newSim(t, wecomsim.Config{})
	obs := store(t)
	f := media.New(media.Config{Policy: media.Policy{Strict: true}})
	m := s.callback(t, wecomsim.MessageRequest{MsgType: "image"})
	var me *media.Error
	if _, err := f.Fetch(context.Background(), obs, media.Batch{TaskID: "t_http", Items: media.Items(&m)}); !errors.As(err, &me) ||
		me.Reason != media.ReasonRefused || !strings.Contains(me.Reply(), "不在允许的范围内") {
		t.Fatalf("http link under a strict policy: %v", err)
	}
	m.Image.URL, m.Image.AESKey = "https"+strings.TrimPrefix(m.Image.URL, "http"), ""
	if _, err := f.Fetch(context.Background(), obs, media.Batch{TaskID: "t_nokey", Items: media.Items(&m)}); !errors.As(err, &me) ||
		me.Reason != media.ReasonRefused || !strings.Contains(me.Error(), "no aeskey") {
		t.Fatalf("no aeskey under a strict policy: %v", err)
	}
}
