package e2e

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/test/e2e/cluster"
)

// posted is one message a traffic run sent.
type posted struct {
	cluster.PostResult
	user, text string
}

// traffic posts "m0", "m1", … to bot every interval, from users in turn,
// until stop. Each conversation stays well within its send budget.
type traffic struct {
	t     *testing.T
	c     *cluster.Cluster
	bot   string
	users []string

	mu    sync.Mutex
	posts []posted
	once  sync.Once
	stopc chan struct{}
	done  chan struct{}
}

func startTraffic(t *testing.T, c *cluster.Cluster, bot string, users []string, interval time.Duration) *traffic {
	tr := &traffic{t: t, c: c, bot: bot, users: users, stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-tr.stopc:
				return
			case <-tick.C:
			}
			user, text := users[i%len(users)], fmt.Sprintf("m%d", i)
			r, err := c.PostMessage(bot, user, text)
			if err != nil {
				t.Errorf("post %s: %v", text, err)
				return
			}
			tr.mu.Lock()
			tr.posts = append(tr.posts, posted{r, user, text})
			tr.mu.Unlock()
		}
	}()
	// The poster ends before the test does, also when the test fails
	// early: posting on into the cluster's teardown would report refused
	// posts, and after the test's end panic (Fail in goroutine after the
	// test completed).
	t.Cleanup(tr.stop)
	return tr
}

// stop ends the posting and waits for the poster.
func (tr *traffic) stop() { tr.once.Do(func() { close(tr.stopc); <-tr.done }) }

// wait waits until n more messages were posted, so that every phase of
// a test has traffic.
func (tr *traffic) wait(n int) {
	tr.t.Helper()
	tr.mu.Lock()
	target := len(tr.posts) + n
	tr.mu.Unlock()
	testwait.NoError(tr.t, 30*time.Second, testwait.Every, "messages posted", func() error {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if len(tr.posts) < target {
			return fmt.Errorf("%d of %d posted", len(tr.posts), target)
		}
		return nil
	})
}

func isBusy(e cluster.TranscriptEntry) bool { return strings.Contains(e.Content, "还在处理中") }

// cutShort: a stream closed before its answer was complete, with the
// note that the complete answer follows by push (push.handover_note when
// a stopping leader closed it, push.truncated_note at the window's end):
// not an answer of its own.
func cutShort(e cluster.TranscriptEntry) bool {
	return strings.Contains(e.Content, "完整回答稍后单独发送") || strings.Contains(e.Content, "完整内容稍后单独发送")
}

// requireHandledOnce stops the traffic, waits up to within until every
// message the simulator delivered is handled, and fails the test where
// one is handled twice, or a message never delivered got a reply. A
// message is handled when it has a reply stream (the busy notice, or its
// answer, complete) or, when the connection it came on closed before its
// reply could be written (a graceful stop: that req_id dies with the
// connection), a push: its answer, or a busy notice in its conversation.
// It returns how many questions were answered and, of those, how many
// reply streams a stopped leader left unfinished (the answer pushed).
func (tr *traffic) requireHandledOnce(within time.Duration) (answered, leftOpen int) {
	t := tr.t
	t.Helper()
	tr.stop()
	tr.mu.Lock()
	posts := append([]posted(nil), tr.posts...)
	tr.mu.Unlock()
	delivered := map[string]posted{}
	undelivered := map[string]bool{}
	for _, p := range posts {
		if p.Delivered {
			delivered[p.MsgID] = p
		} else {
			undelivered[p.MsgID] = true
		}
	}
	t.Logf("posted %d messages: %d delivered, %d not (no connection at that moment)", len(posts), len(delivered), len(undelivered))
	if len(delivered) < len(posts)/2 {
		t.Errorf("only %d of %d messages delivered", len(delivered), len(posts))
	}
	var (
		replies    map[string][]cluster.TranscriptEntry
		answers    map[string]int // message text → complete answers seen
		busyPushes map[string]int // user → busy notices pushed
		pushedOnly map[string]int // user → delivered messages without a reply stream or a pushed answer
	)
	start := time.Now()
	testwait.NoError(t, within, testwait.Every, "every delivered message handled and every answer complete", func() error {
		replies, answers, busyPushes, pushedOnly = map[string][]cluster.TranscriptEntry{}, map[string]int{}, map[string]int{}, map[string]int{}
		for _, u := range tr.users {
			entries, err := tr.c.Transcript(tr.bot, u)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if e.From != "bot" {
					continue
				}
				if e.ReplyTo != "" {
					replies[e.ReplyTo] = append(replies[e.ReplyTo], e)
				} else if isBusy(e) {
					busyPushes[u]++
				}
				if q, ok := strings.CutPrefix(e.Content, "You asked: "); ok && (e.Kind == "markdown" || e.Finished) && !cutShort(e) {
					q, _, _ = strings.Cut(q, "\n")
					answers[q]++
				}
			}
		}
		var missing []string
		for _, p := range delivered {
			rs := replies[p.MsgID]
			switch {
			case len(rs) == 0 && answers[p.text] == 0:
				pushedOnly[p.user]++ // owed a busy notice by push
			case len(rs) > 0 && !isBusy(rs[0]) && answers[p.text] == 0:
				missing = append(missing, p.text+" (answer incomplete)")
			}
		}
		for user, n := range pushedOnly {
			if busyPushes[user] < n {
				missing = append(missing, fmt.Sprintf("%s: %d messages with no reply, %d busy notices pushed", user, n, busyPushes[user]))
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return fmt.Errorf("%d delivered messages not done: %v", len(missing), missing)
		}
		return nil
	})
	t.Logf("every delivered message handled %s after the last post", time.Since(start).Round(time.Millisecond))
	for id, rs := range replies {
		p, ok := delivered[id]
		switch {
		case !ok && undelivered[id]:
			t.Errorf("message %s was never delivered but has %d replies", id, len(rs))
		case !ok:
			t.Errorf("reply to unknown message %s", id)
		case len(rs) != 1:
			t.Errorf("message %s (%q) has %d reply streams, want exactly 1 (handled twice): %+v", id, p.text, len(rs), rs)
		case !isBusy(rs[0]):
			answered++
			if n := answers[p.text]; n != 1 {
				t.Errorf("the answer to %q reached the user %d times, want 1", p.text, n)
			}
			if !rs[0].Finished {
				leftOpen++
			}
		}
	}
	for _, p := range delivered {
		if len(replies[p.MsgID]) == 0 && answers[p.text] > 0 {
			answered++
			if n := answers[p.text]; n != 1 {
				t.Errorf("the answer to %q reached the user %d times, want 1", p.text, n)
			}
		}
	}
	n := 0
	for _, c := range pushedOnly {
		n += c
	}
	t.Logf("%d questions answered (%d reply streams left unfinished by a stopped leader, their answers pushed); %d messages told busy by push (their connection closed before the reply)", answered, leftOpen, n)
	if answered < len(tr.users) {
		t.Errorf("only %d questions answered", answered)
	}
	return answered, leftOpen
}
