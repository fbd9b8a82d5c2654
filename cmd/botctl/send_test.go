package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
)

// botctl send finds the leader in etcd and sends with the token the node
// generated in its data dir: the message reaches the chat and the command
// exits 0. A chat that never talked to the bot gets WeCom's refusal, and
// the command fails saying so.
func TestSendReachesTheChatThroughTheLeader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	simAddr := ln.Addr().String()
	ln.Close() // the demo's simulator takes the port
	dir := t.TempDir()
	serveUntilReady(t, "serve", "--demo", "--demo-listen", simAddr, "--listen", "127.0.0.1:0", "--data-dir", dir)
	sim := "http://" + simAddr
	transcript := func(chat string) string {
		resp, err := http.Get(sim + "/control/transcript?bot_id=demo&chat=" + url.QueryEscape(chat))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var tr struct {
			Messages []struct {
				From, Kind, Content string
				Finished            bool
			} `json:"messages"`
		}
		json.NewDecoder(resp.Body).Decode(&tr)
		b, _ := json.Marshal(tr.Messages)
		return string(b)
	}
	resp, err := http.Post(sim+"/control/messages", "application/json", strings.NewReader(`{"bot_id":"demo","user_id":"alice","text":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	testwait.Eventually(t, time.Minute, "alice's receipt", func() bool { return strings.Contains(transcript("alice"), `"From":"bot"`) })

	ep, err := os.ReadFile(filepath.Join(dir, endpointFile))
	if err != nil {
		t.Fatal(err)
	}
	etcd := strings.TrimSpace(string(ep))
	s, err := run(t, "send", "--etcd", etcd, "--data-dir", dir, "--bot", "demo", "--chat", "alice", "--markdown", "**sent by botctl send**")
	if err != nil || !strings.Contains(s, `"errcode": 0`) {
		t.Fatalf("botctl send: %v\n%s", err, s)
	}
	if tr := transcript("alice"); !strings.Contains(tr, `"Kind":"markdown","Content":"**sent by botctl send**"`) {
		t.Fatalf("the message is not in alice's chat: %s", tr)
	}
	s, err = run(t, "send", "--etcd", etcd, "--data-dir", dir, "--bot", "demo", "--chat", "nobody", "--markdown", "hi")
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(s, "846604") {
		t.Fatalf("botctl send to a chat that never talked to the bot: %v\n%s, want a 403 with WeCom's errcode", err, s)
	}
	if _, err := run(t, "send", "--etcd", etcd, "--data-dir", dir, "--bot", "demo", "--chat", "alice"); err == nil {
		t.Fatal("botctl send without a message succeeded")
	}
}

// serveUntilReady runs botctl with args (a serve command) until the test
// ends, and returns once it has printed its ready line.
func serveUntilReady(t *testing.T, args ...string) {
	t.Helper()
	out := &lines{seen: make(chan string, 64)}
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(out)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("serve did not return within 60 s of its context's end")
		}
	})
	deadline := time.After(60 * time.Second)
	for ready := false; !ready; {
		select {
		case l := <-out.seen:
			ready = strings.Contains(l, "serving bots")
		case err := <-done:
			t.Fatalf("serve returned before its ready line: %v", err)
		case <-deadline:
			t.Fatal("no ready line within 60 s")
		}
	}
}
