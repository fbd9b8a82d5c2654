package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/botctl/botctl/test/e2e/cluster"
)

// finals counts the complete answers chat got to question: finished
// streams and pushed parts that start the answer.
func finals(t *testing.T, c *cluster.Cluster, chat, question string) (int, []cluster.TranscriptEntry) {
	t.Helper()
	tr, err := c.Transcript("b1", chat)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range tr {
		if e.From == "bot" && strings.Contains(e.Content, "You asked: "+question+"\n") && (e.Finished || e.Kind == "markdown") {
			n++
		}
	}
	return n, tr
}

// toldIncomplete waits for the answer to question in chat and checks that
// it tells the user the conversation may be incomplete.
func toldIncomplete(t *testing.T, c *cluster.Cluster, chat, question string) {
	t.Helper()
	testwait.NoError(t, 60*time.Second, testwait.Every, chat+" told", func() error {
		n, tr := finals(t, c, chat, question)
		if n == 0 {
			return fmt.Errorf("no answer yet: %+v", tr)
		}
		for _, e := range tr {
			if e.From == "bot" && (e.Finished || e.Kind == "markdown") && strings.Contains(e.Content, "You asked: "+question) {
				if !strings.Contains(e.Content, "可能未被处理") {
					t.Fatalf("the answer does not tell the user: %q", e.Content)
				}
				return nil
			}
		}
		return fmt.Errorf("no final")
	})
}

// awayDuringAnswer asks question as user, waits for its receipt, then
// takes bot b1 away from WeCom for seconds (dropped, reconnection refused)
// and returns the incident once it has closed: the one incident there is.
func awayDuringAnswer(t *testing.T, c *cluster.Cluster, user, question string, seconds float64) incident.Incident {
	t.Helper()
	if _, err := c.PostMessage("b1", user, question); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 30*time.Second, testwait.Every, user+"'s receipt", func() error {
		if _, tr := finals(t, c, user, question); len(tr) < 2 {
			return fmt.Errorf("transcript %+v", tr)
		}
		return nil
	})
	if err := c.Fault("b1", "refuse_subscribe", seconds); err != nil {
		t.Fatal(err)
	}
	if err := c.Fault("b1", "drop", 0); err != nil {
		t.Fatal(err)
	}
	var inc incident.Incident
	testwait.NoError(t, 90*time.Second, testwait.Every, "the incident closed", func() error {
		all := incidents(t, c)
		if len(all) != 1 || all[0].State != "closed" {
			return fmt.Errorf("incidents %+v", all)
		}
		inc = all[0]
		return nil
	})
	return inc
}

// An answer that completes while the bot is away is owed by push: after
// recovery it is replayed exactly once, and the incident counts it.
func TestOutboundReplayExactlyOnce(t *testing.T) {
	t.Parallel()
	c := newClusterWith(t, []string{"b1"}, []string{"--ai", "demo", "--demo-answer-time", "3s"})
	startNodes(t, c, 2)
	waitStable(t, c)
	// Away for 10 s: the answer completes meanwhile.
	inc := awayDuringAnswer(t, c, "erin", "long one", 10)
	if inc.Replay.Held != 1 || inc.Replay.Replayed != 1 || inc.Replay.DroppedStale != 0 {
		t.Fatalf("replay %+v, want 1 owed and 1 replayed, none stale (the stream finished while away)", inc.Replay)
	}
	// Settled: nothing more arrives.
	time.Sleep(3 * time.Second)
	if n, tr := finals(t, c, "erin", "long one"); n != 1 {
		t.Fatalf("%d complete answers after the replay, want exactly 1: %+v", n, tr)
	}
}

// A stream still running when the bot comes back: its progress while away
// is not sent late (counted as dropped stale, not owed), and the user gets
// the answer once, when it completes. The 30 s answer outlasts the 6 s
// outage and the reconnect with a wide margin.
func TestStaleStreamProgressIsDropped(t *testing.T) {
	t.Parallel()
	c := newClusterWith(t, []string{"b1"}, []string{"--ai", "demo", "--demo-answer-time", "30s"})
	startNodes(t, c, 1)
	waitStable(t, c)
	inc := awayDuringAnswer(t, c, "fred", "slow one", 6)
	if inc.Replay.DroppedStale != 1 || inc.Replay.Held != 0 {
		t.Fatalf("replay %+v, want 1 stream dropped as stale and nothing owed", inc.Replay)
	}
	testwait.NoError(t, 90*time.Second, testwait.Every, "fred's answer", func() error {
		if n, tr := finals(t, c, "fred", "slow one"); n == 0 {
			return fmt.Errorf("no complete answer yet: %d entries", len(tr))
		}
		return nil
	})
	// Settled: nothing more arrives.
	time.Sleep(3 * time.Second)
	if n, tr := finals(t, c, "fred", "slow one"); n != 1 {
		t.Fatalf("%d complete answers, want exactly 1: %+v", n, tr)
	}
}

// A gap bigger than the backfill's budget: what it could not answer marks
// the conversations "may be incomplete" and pages a person (a data
// incident); the next answer in such a conversation tells the user.
func TestBackfillBudgetSpentMarksAndTells(t *testing.T) {
	t.Parallel()
	c := newClusterWith(t, []string{"b1"}, []string{"--ai", "demo", "--demo-answer-time", "1s", "--backfill-max-messages", "1"})
	startNodes(t, c, 1)
	waitStable(t, c)
	if err := c.Fault("b1", "refuse_subscribe", 6); err != nil {
		t.Fatal(err)
	}
	if err := c.Fault("b1", "drop", 0); err != nil {
		t.Fatal(err)
	}
	users := []string{"u1", "u2", "u3"}
	for _, u := range users {
		if _, err := c.PostMessage("b1", u, "while away"); err != nil {
			t.Fatal(err)
		}
	}
	var data incident.Incident
	// Opened, then told its conversations (two writes): wait for both.
	testwait.NoError(t, 90*time.Second, testwait.Every, "a data incident for the unfilled messages", func() error {
		for _, i := range incidents(t, c) {
			if i.Kind == "data" {
				data = i
				if len(i.Incomplete) < 2 {
					return fmt.Errorf("data incident lists %d conversations so far", len(i.Incomplete))
				}
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
	if data.Level != "human" || data.Signal != "backfill" || len(data.Incomplete) != 2 {
		t.Fatalf("data incident: %+v", data)
	}
	// The marked users' next answer starts with the note.
	marked := data.Incomplete[0]
	if _, err := c.PostMessage("b1", marked, "hello again"); err != nil {
		t.Fatal(err)
	}
	toldIncomplete(t, c, marked, "hello again")
	// Told once: the mark is gone.
	raw, err := c.Status(ctxTimeout(t, 15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Bots []struct {
			Incomplete int `json:"incomplete"`
		} `json:"bots"`
	}
	if err := json.Unmarshal(raw, &st); err != nil || len(st.Bots) != 1 || st.Bots[0].Incomplete != 1 {
		t.Fatalf("status after telling one of two: %s", raw)
	}
}

// A gap longer than the backfill's overlap, with traffic right after the
// reconnect: the pass starts from the watermark as it was when the bot
// came back, not as the new connection's first messages moved it, so the
// older part of the gap is answered too.
func TestGapLongerThanOverlapIsBackfilled(t *testing.T) {
	t.Parallel()
	c := newClusterWith(t, []string{"b1"}, []string{"--ai", "demo", "--demo-answer-time", "1s", "--backfill-overlap", "1s"})
	startNodes(t, c, 1)
	waitStable(t, c)
	if _, err := c.PostMessage("b1", "u0", "before"); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 30*time.Second, testwait.Every, "u0 answered", func() error {
		if n, tr := finals(t, c, "u0", "before"); n != 1 {
			return fmt.Errorf("%+v", tr)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // the watermark is written every 2 s
	if err := c.Fault("b1", "refuse_subscribe", 6); err != nil {
		t.Fatal(err)
	}
	if err := c.Fault("b1", "drop", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PostMessage("b1", "u1", "early in the gap"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if _, err := c.PostMessage("b1", "u2", "late in the gap"); err != nil {
		t.Fatal(err)
	}
	// Traffic right after the reconnect moves the watermark on.
	testwait.NoError(t, 60*time.Second, testwait.Every, "reconnected", func() error {
		if st, err := c.Stats("b1"); err != nil || !st.Connected {
			return fmt.Errorf("not connected")
		}
		return nil
	})
	for k := 0; k < 10; k++ {
		c.PostMessage("b1", fmt.Sprintf("after-%d", k), "after")
		time.Sleep(300 * time.Millisecond)
	}
	for _, u := range []struct{ user, q string }{{"u1", "early in the gap"}, {"u2", "late in the gap"}} {
		testwait.NoError(t, 60*time.Second, testwait.Every, u.user+" answered late", func() error {
			if n, tr := finals(t, c, u.user, u.q); n != 1 {
				return fmt.Errorf("%+v", tr)
			}
			return nil
		})
	}
}

// No history source (production WeCom, as far as known) and an outage: the
// gap cannot be checked for missed messages, so a person is paged (one
// human data incident) and the conversations active around the gap are
// marked "may be incomplete": the next answer there tells the user. The
// short recovery.* settings keep the half-open after the outage brief.
func TestNoHistorySourcePagesAndTells(t *testing.T) {
	t.Parallel()
	c := newClusterWith(t, []string{"b1"}, []string{"--ai", "demo", "--demo-answer-time", "1s", "--backfill-history-url=",
		"--recovery-threshold", "2s", "--recovery-probes", "1", "--recovery-observe", "2s"})
	startNodes(t, c, 1)
	waitStable(t, c)
	if _, err := c.PostMessage("b1", "u1", "before"); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 30*time.Second, testwait.Every, "u1 answered", func() error {
		if n, tr := finals(t, c, "u1", "before"); n != 1 {
			return fmt.Errorf("%+v", tr)
		}
		return nil
	})
	if err := c.Fault("b1", "refuse_subscribe", 6); err != nil {
		t.Fatal(err)
	}
	if err := c.Fault("b1", "drop", 0); err != nil {
		t.Fatal(err)
	}
	// Lost: nothing can find it again.
	if _, err := c.PostMessage("b1", "u1", "while away"); err != nil {
		t.Fatal(err)
	}
	var data incident.Incident
	// Opened, then told its conversations (two writes): wait for both.
	testwait.NoError(t, 90*time.Second, testwait.Every, "a data incident for the unchecked gap", func() error {
		for _, i := range incidents(t, c) {
			if i.Kind == "data" {
				data = i
				if len(i.Incomplete) == 0 {
					return fmt.Errorf("data incident lists no conversation so far")
				}
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
	if data.Level != "human" || data.Signal != "backfill" || !strings.Contains(data.Reason, "could not be checked") ||
		len(data.Incomplete) != 1 || data.Incomplete[0] != "u1" {
		t.Fatalf("data incident: %+v", data)
	}
	n := 0
	for _, i := range incidents(t, c) {
		if i.Kind == "data" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d data incidents for one gap, want 1", n)
	}
	if _, err := c.PostMessage("b1", "u1", "hello again"); err != nil {
		t.Fatal(err)
	}
	toldIncomplete(t, c, "u1", "hello again")
}
