package serve

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// The media store filled to its bound (media.max_store_bytes) while
// users keep asking questions: a file sent then is refused and its user
// told storage is full, with no task; every question is answered, once;
// once room is made the same file is taken, answered, and deleted from
// the store after its delivery.
func TestMediaStoreFullTextGoesOn(t *testing.T) {
	t.Parallel()
	const bound = 1 << 20
	sim, wecomURL := startSimBots(t, "b1")
	e, ns := startEtcd(t), startNATS(t)
	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.AI.Demo.AnswerTime = 50 * time.Millisecond
	cfg.Media.MaxBytes, cfg.Media.MaxStoreBytes = 256<<10, bound
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s-b1"}}
	rn, err := startNode(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Minute, "b1 connected", func() bool { st, _ := sim.Stats("b1"); return st.Connected })
	ctx := context.Background()

	// Text traffic throughout: four users, each asking in turn.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	asked := map[string]string{} // msgid → chat, of the questions answered
	var unanswered []string
	for u := range 4 {
		wg.Go(func() {
			user := "talker" + strconv.Itoa(u)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				q := fmt.Sprintf("question %d of %s", i, user)
				msgid, ok := askQuietly(sim, user, q)
				mu.Lock()
				if ok {
					asked[msgid] = user
				} else {
					unanswered = append(unanswered, q)
				}
				mu.Unlock()
			}
		})
	}

	// Other tasks' files fill the store to its bound.
	var filler []string
	for i := 0; ; i++ {
		if i == 64 {
			t.Fatalf("the media store took %d files of 64 KiB under a bound of 1 MiB", i)
		}
		key := "t_other" + strconv.Itoa(i) + "/0"
		if _, err := rn.Store.Media().PutBytes(ctx, key, make([]byte, 64<<10)); err != nil {
			if !jetstream.MediaFull(err) {
				t.Fatalf("filling the media store: %v", err)
			}
			rn.Store.DeleteMedia(ctx, key) // a refused put's name
			break
		}
		filler = append(filler, key)
	}
	used, err := rn.Store.MediaBytes(ctx)
	if err != nil || used > bound || used < bound-80<<10 {
		t.Fatalf("media store holds %d bytes (%v), want the bound %d nearly", used, err, bound)
	}
	if got := gaugeValue(rn.scrape(t), "botctl_media_store_bytes"); got != float64(used) {
		t.Errorf("botctl_media_store_bytes %g, want %d", got, used)
	}

	// A file now: refused, its user told, no task.
	file := wecomsim.MessageRequest{BotID: "b1", UserID: "sender", MsgType: "file", MediaPart: wecomsim.MediaPart{Size: 100 << 10, Filename: "report.txt"}}
	res, err := sim.PostMessage(file)
	if err != nil {
		t.Fatal(err)
	}
	refusal := finalReply(t, sim, "sender", res.MsgID)
	if !strings.Contains(refusal, "存储空间已满") {
		t.Fatalf("the file's reply %q, want storage full", refusal)
	}
	testwait.NoError(t, 30*time.Second, testwait.Every, "the refused file's record removed", func() error {
		if _, err := rn.Lifecycle.Get(ctx, task.ID("b1", res.MsgID)); !errors.Is(err, natsjs.ErrKeyNotFound) {
			return fmt.Errorf("task record of the refused file: %v, want none (removed once answered at receipt)", err)
		}
		return nil
	})

	// Questions keep being answered while the store is full.
	mu.Lock()
	before := len(asked)
	mu.Unlock()
	testwait.Eventually(t, 2*time.Minute, "ten more questions answered with the store full", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(asked) >= before+10
	})

	// Room made: the same file is taken, answered and, once delivered,
	// deleted.
	if err := rn.Store.DeleteMedia(ctx, filler...); err != nil {
		t.Fatal(err)
	}
	file.MsgID = ""
	res, err = sim.PostMessage(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := finalReply(t, sim, "sender", res.MsgID); !strings.Contains(got, "report.txt") {
		t.Fatalf("the file's answer once there is room: %q", got)
	}
	testwait.Eventually(t, time.Minute, "the delivered file deleted", func() bool {
		used, err := rn.Store.MediaBytes(ctx)
		return err == nil && used < 16<<10
	})

	close(stop)
	wg.Wait()
	if len(unanswered) > 0 {
		t.Errorf("questions not answered within a minute: %q", unanswered)
	}
	for msgid, chat := range asked {
		n := 0
		for _, e := range sim.Transcript("b1", chat) {
			if e.From == "bot" && e.Finished && e.ReplyTo == msgid {
				n++
			}
		}
		if n != 1 {
			t.Errorf("question %s answered %d times", msgid, n)
		}
	}
}

// finalReply is the finished reply to msgid in user's single chat.
func finalReply(t *testing.T, sim *wecomsim.Server, user, msgid string) (content string) {
	t.Helper()
	testwait.Eventually(t, time.Minute, "a reply to "+msgid, func() bool {
		for _, e := range sim.Transcript("b1", user) {
			if e.From == "bot" && e.Finished && e.ReplyTo == msgid {
				content = e.Content
				return true
			}
		}
		return false
	})
	return content
}

// askQuietly posts text from user in their single chat and waits up to
// a minute for its answer (ok); msgid "": it could not be posted. For a
// goroutine of a test: it never fails the test itself.
func askQuietly(sim *wecomsim.Server, user, text string) (msgid string, ok bool) {
	res, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: user, Text: text})
	if err != nil {
		return "", false
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, e := range sim.Transcript("b1", user) {
			if e.From == "bot" && e.Finished && e.ReplyTo == res.MsgID {
				return res.MsgID, true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return res.MsgID, false
}

// limits.user.bytes_per_day and limits.bot.bytes_per_day: a file that
// would pass a day's bytes is refused, its user told which limit, with
// no task; text goes on, and other users' files are taken up to the
// bot's bytes.
func TestFileBytesPerDayLimits(t *testing.T) {
	t.Parallel()
	// The counts are a UTC day's: not across its end.
	if now := time.Now().UTC(); now.Hour() == 23 && now.Minute() >= 58 {
		time.Sleep(now.Truncate(24 * time.Hour).Add(24*time.Hour + 5*time.Second).Sub(now))
	}
	sim, rn := limitsNode(t, "{user: {bytes_per_day: 150000}, bot: {bytes_per_day: 250000}}")
	send := func(user string) (msgid, reply string) {
		t.Helper()
		res, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: user, MsgType: "file", MediaPart: wecomsim.MediaPart{Size: 100 << 10, Filename: "notes.txt"}})
		if err != nil {
			t.Fatal(err)
		}
		return res.MsgID, finalReply(t, sim, user, res.MsgID)
	}
	if _, got := send("alice"); !strings.Contains(got, "notes.txt") {
		t.Fatalf("alice's first file (100 KiB of 150000 bytes): %q", got)
	}
	msgid, got := send("alice")
	if !strings.Contains(got, "你今天发送的图片和文件已达上限（146 KB）") {
		t.Fatalf("alice's second file (200 KiB of 150000 bytes): %q, want the user's limit", got)
	}
	// The message was recorded before its download; the handling removes
	// the record once it has answered at receipt (no task ran).
	testwait.NoError(t, 30*time.Second, testwait.Every, "the refused file's record removed", func() error {
		if _, err := rn.Lifecycle.Get(context.Background(), task.ID("b1", msgid)); !errors.Is(err, natsjs.ErrKeyNotFound) {
			return fmt.Errorf("task record of the refused file: %v, want none", err)
		}
		return nil
	})
	res, err := sim.PostMessage(wecomsim.MessageRequest{BotID: "b1", UserID: "alice", Text: "and a question"})
	if err != nil {
		t.Fatal(err)
	}
	if got := finalReply(t, sim, "alice", res.MsgID); strings.Contains(got, "上限") {
		t.Fatalf("alice's text after her files' limit: %q", got)
	}
	if _, got := send("bob"); !strings.Contains(got, "notes.txt") {
		t.Fatalf("bob's file (the bot at 200 KiB of 250000 bytes): %q", got)
	}
	if _, got := send("carol"); !strings.Contains(got, "今天接收的图片和文件已达上限") {
		t.Fatalf("carol's file (the bot at 300 KiB of 250000 bytes): %q, want the bot's limit", got)
	}
	m := rn.scrape(t)
	for _, want := range []string{`botctl_limit_refusals_total{bot="b1",limit="user.bytes_per_day"} 1`, `botctl_limit_refusals_total{bot="b1",limit="bot.bytes_per_day"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics: no %s", want)
		}
	}
}

// gaugeValue is the value of the unlabelled metric name in a scrape (-1:
// none); Prometheus writes large numbers with an exponent.
func gaugeValue(scrape, name string) float64 {
	for _, line := range strings.Split(scrape, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// A node started on a deployment whose media store has no bound (made by
// a botctl before the bound) bounds it at media.max_store_bytes, keeping
// its files, says so in its log, and reports the bound on /metrics.
func TestNodeBoundsAnUnboundedMediaStore(t *testing.T) {
	t.Parallel()
	_, wecomURL := startSimBots(t, "b1")
	e, ns := startEtcd(t), startNATS(t)
	_, js := testenv.Connect(t, ns.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old, err := js.CreateObjectStore(ctx, natsjs.ObjectStoreConfig{Bucket: "BOTCTL_MEDIA", TTL: 24 * time.Hour, Storage: natsjs.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.PutBytes(ctx, "t_before/0", []byte("stored before the upgrade")); err != nil {
		t.Fatal(err)
	}

	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	cfg.Bots = []config.Bot{{ID: "b1", Secret: "s-b1"}}
	var mu sync.Mutex
	var logged strings.Builder
	rn, err := startNodeLogged(t, cfg, zerolog.New(lineWriter(func(l string) { mu.Lock(); logged.WriteString(l); mu.Unlock() })))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "OBJ_BOTCTL_MEDIA")
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxBytes != config.DefaultMediaMaxStoreBytes || c.Discard != natsjs.DiscardNew {
		t.Fatalf("media stream after the node started: MaxBytes %d, discard %v; want media.max_store_bytes' default %d and DiscardNew", c.MaxBytes, c.Discard, int64(config.DefaultMediaMaxStoreBytes))
	}
	if got := gaugeValue(rn.scrape(t), "botctl_media_store_max_bytes"); got != config.DefaultMediaMaxStoreBytes {
		t.Errorf("botctl_media_store_max_bytes %g, want %d", got, int64(config.DefaultMediaMaxStoreBytes))
	}
	if got, err := rn.Store.Media().GetBytes(ctx, "t_before/0"); err != nil || string(got) != "stored before the upgrade" {
		t.Errorf("the file stored before the upgrade: %q, %v", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if s := logged.String(); !strings.Contains(s, "deployed without a bound; media.max_store_bytes is applied") {
		t.Errorf("the node's log does not say the bound was applied:\n%s", s)
	}
}
