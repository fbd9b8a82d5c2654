package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/botctl/botctl/pkg/wecomsim"
)

// Media messages: a text question quoting a file the user sent earlier
// (the simulator serves the file encrypted at a URL, as WeCom does). The
// leader downloads the file before the task is dispatched, and the demo
// backend's answer is the file's account followed by the answer to the
// text: judged as a text message's, by the question. A file refused
// because the media store is full is answered by the storage-full reply
// (storageFullText), which tells the user what became of it; so is one
// refused for another reason, the user asked to send it again
// (fileRefusedText, mediaUnavailableText).

// storageFullText is pkg/media's reply to a file refused because the
// media store is full (not imported, as busyText).
const storageFullText = "文件存储空间已满"

// fileRefusedText ends every pkg/media reply to a file not taken ("…未能
// 接收…": not received; send it again), mediaUnavailableText is
// pkg/access's to files while JetStream is away.
const (
	fileRefusedText      = "未能接收"
	mediaUnavailableText = "暂时无法接收图片和文件"
)

var simClient = &http.Client{Timeout: 30 * time.Second}

// PostMedia posts from user a text message quoting a file of size bytes
// (fault: a wecomsim media fault, "" none) and records it. The user is
// one of the conversations probed after the round.
func (t *Traffic) PostMedia(round, user string, size int, fault string) *Msg {
	t.mu.Lock()
	t.counter[user]++
	n := t.counter[user]
	t.addConversation(user)
	t.mu.Unlock()
	m := &Msg{Round: round, User: user, Media: true, Question: fmt.Sprintf("chaos %s %s media q #%d", round, user, n), PostedAt: time.Now()}
	req := wecomsim.MessageRequest{BotID: t.bot, UserID: user, Text: m.Question,
		Quote: &wecomsim.QuotePart{MsgType: "file", MediaPart: wecomsim.MediaPart{Filename: fmt.Sprintf("chaos-%d.bin", n), Size: size, Fault: fault}}}
	r, err := t.postRaw(req)
	if err != nil {
		m.PostErr = err.Error()
	} else {
		m.MsgID, m.Delivered = r.MsgID, r.Delivered
	}
	t.mu.Lock()
	t.msgs = append(t.msgs, m)
	t.mu.Unlock()
	return m
}

// addConversation adds user to the conversations probed after a round
// (t.mu held).
func (t *Traffic) addConversation(user string) {
	for _, u := range t.Conversations() {
		if u == user {
			return
		}
	}
	t.extra = append(t.extra, user)
}

func (t *Traffic) postRaw(req wecomsim.MessageRequest) (wecomsim.MessageResult, error) {
	var r wecomsim.MessageResult
	body, _ := json.Marshal(req)
	resp, err := simClient.Post(t.c.SimHTTP+"/control/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("POST /control/messages: %s: %s", resp.Status, data)
	}
	return r, json.Unmarshal(data, &r)
}

// simMedia lists the media items the simulator serves for the bot.
func (h *Harness) simMedia() ([]wecomsim.MediaInfo, error) {
	var v struct {
		Media []wecomsim.MediaInfo `json:"media"`
	}
	resp, err := simClient.Get(h.C.SimHTTP + "/control/media?bot_id=" + bot)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /control/media: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&v)
	return v.Media, err
}

// killLeaderMidDownload posts a media message whose file's URL sends
// nothing (the download hangs until the message's deadline), waits until
// the leader is downloading it, and kills -9 the leader's process group
// (restarted 5 s later). The message lived only in that leader's memory
// but for the record written before its download: the next leader's sweep
// gives it up past its deadline and the user is told it failed, once
// (ExpectFailed); a complete answer would do as well.
func (h *Harness) killLeaderMidDownload(r *RoundResult) error {
	if _, err := h.Leader(); err != nil {
		return err
	}
	user := fmt.Sprintf("chaos-%s-m1", h.Traffic.nonce)
	m := h.Traffic.PostMedia(fmt.Sprintf("%s-r%d", r.Scenario, r.Round), user, 4096, "stall")
	if m.PostErr != "" || !m.Delivered {
		return fmt.Errorf("media message not delivered (%s)", m.PostErr)
	}
	r.ExpectFailed = map[string]bool{m.MsgID: true}
	deadline := time.Now().Add(30 * time.Second)
	for {
		items, err := h.simMedia()
		downloading := false
		for _, it := range items {
			if it.MsgID == m.MsgID && it.Downloads > 0 {
				downloading = true
			}
		}
		if downloading {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the leader did not start downloading %s's file within 30s (last error: %v)", m.MsgID, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.note("media message %s: its file's download in progress (the URL stalls); kill -9 the leader", m.MsgID)
	return h.killLeader(r, 5*time.Second)
}
