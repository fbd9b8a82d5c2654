package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/wecom"
)

// waitAnswers waits up to Settle for every sent message to be answered,
// and returns the msgids that were not.
func (d *Drill) waitAnswers(ctx context.Context, sent []sentMsg) []string {
	deadline := time.Now().Add(d.cfg.Settle)
	for {
		var lost []string
		for _, m := range sent {
			ok, err := d.answered(ctx, m)
			if err != nil || !ok {
				lost = append(lost, m.msgid)
			}
		}
		if len(lost) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return lost
		}
		pause.For(ctx, 2*time.Second)
	}
}

type transcriptEntry struct {
	From     string `json:"from"`
	Kind     string `json:"kind"`
	Finished bool   `json:"finished"`
}

func (d *Drill) answered(ctx context.Context, m sentMsg) (bool, error) {
	var tr struct {
		Entries []transcriptEntry `json:"messages"`
	}
	if err := d.get(ctx, "/control/transcript?bot_id="+url.QueryEscape(d.cfg.Bot)+"&chat="+url.QueryEscape(m.user), &tr); err != nil {
		return false, err
	}
	for _, e := range tr.Entries {
		if e.From == "bot" && (e.Finished || e.Kind == "markdown") {
			return true, nil
		}
	}
	return false, nil
}

func (d *Drill) fault(ctx context.Context, action string, seconds float64) error {
	return d.post(ctx, "/control/faults", map[string]any{"bot_id": d.cfg.Bot, "action": action, "seconds": seconds}, nil)
}

func (d *Drill) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(d.cfg.Sim, "/")+path, nil)
	if err != nil {
		return err
	}
	return d.do(req, v)
}

func (d *Drill) post(ctx context.Context, path string, body, v any) error {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(d.cfg.Sim, "/")+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return d.do(req, v)
}

func (d *Drill) do(req *http.Request, v any) error {
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, bytes.TrimSpace(data))
	}
	if v != nil {
		return json.Unmarshal(data, v)
	}
	return nil
}

// traffic sends one message per Interval, each from its own conversation.
type traffic struct {
	d     *Drill
	round int
	// group, if set: every groupEvery-th message is sent in this group
	// chat instead (a group answers one message at a time).
	group     string
	sent      []sentMsg // read after run returns
	groupSent []string  // msgids, read after run returns
}

// groupEvery: one group message per this many messages.
const groupEvery = 5

type sentMsg struct{ user, msgid string }

func (t *traffic) run(ctx context.Context) {
	tick := clock.Or(t.d.cfg.Clock).NewTicker(t.d.cfg.Interval)
	defer tick.Stop()
	for k := 1; ; k++ {
		user := fmt.Sprintf("drill-%d-r%d-%d", time.Now().Unix()%100000, t.round, k)
		var res struct {
			MsgID string `json:"msgid"`
		}
		msg := map[string]string{"bot_id": t.d.cfg.Bot, "user_id": user, "text": fmt.Sprintf("drill question %d", k)}
		inGroup := t.group != "" && k%groupEvery == 0
		if inGroup {
			msg["chat_type"], msg["chat_id"], msg["text"] = wecom.ChatGroup, t.group, fmt.Sprintf("@bot drill question %d", k)
		}
		err := t.d.post(ctx, "/control/messages", msg, &res)
		switch {
		case err != nil || res.MsgID == "":
		case inGroup:
			t.groupSent = append(t.groupSent, res.MsgID)
		default:
			t.sent = append(t.sent, sentMsg{user: user, msgid: res.MsgID})
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
	}
}

func poll(ctx context.Context, every time.Duration, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if !pause.For(ctx, every) {
			return ctx.Err()
		}
	}
}
