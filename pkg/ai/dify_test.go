package ai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	"github.com/rs/zerolog"
)

const testDifyKey = "app-dify-0123456789abcdef"

// fakeDify is a Dify server's chat API as Dify's API reference documents
// it (POST /v1/chat-messages, response_mode streaming): conversations
// belong to the user who started them; an unknown conversation_id, or
// another user's, is 404 "Conversation Not Exists."; the answer streams
// as `data: {"event": …}` lines with `event: ping` between, ending in
// message_end. answer writes the events of one answer (nil: the default
// answer, in two messages, the second split inside a rune).
type fakeDify struct {
	*webServer
	mu            sync.Mutex
	conversations map[string]string // id → user
	started       int
	answer        func(w http.ResponseWriter, conv string, body map[string]any)
}

func newFakeDify(t *testing.T) *fakeDify {
	f := &fakeDify{conversations: map[string]string{}}
	f.webServer = newWebServer(t, f.serve)
	return f
}

func difyRefuse(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"code": code, "message": message, "status": status})
}

func sendDifyEvent(w http.ResponseWriter, ev map[string]any) {
	raw, _ := json.Marshal(ev)
	write(w, "data: "+string(raw)+"\n\n")
}

func (f *fakeDify) serve(w http.ResponseWriter, r *http.Request, got webRequest) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat-messages" {
		difyRefuse(w, 404, "not_found", "The requested URL was not found on the server.")
		return
	}
	if got.auth != "Bearer "+testDifyKey {
		difyRefuse(w, 401, "unauthorized", "Access token is invalid")
		return
	}
	user, _ := got.body["user"].(string)
	query, _ := got.body["query"].(string)
	if got.body["response_mode"] != "streaming" || user == "" || query == "" {
		difyRefuse(w, 400, "invalid_param", "query, user and response_mode are required")
		return
	}
	if _, ok := got.body["inputs"].(map[string]any); !ok {
		difyRefuse(w, 400, "invalid_param", "inputs is required")
		return
	}
	conv, _ := got.body["conversation_id"].(string)
	f.mu.Lock()
	if conv == "" {
		f.started++
		conv = fmt.Sprintf("45701982-8118-4bc5-8e9b-%012d", f.started)
		f.conversations[conv] = user
	} else if f.conversations[conv] != user {
		f.mu.Unlock()
		difyRefuse(w, 404, "not_found", "Conversation Not Exists.")
		return
	}
	answer := f.answer
	f.mu.Unlock()
	eventStream(w)
	if answer != nil {
		answer(w, conv, got.body)
		return
	}
	a, b := splitRune("世界")
	base := `"conversation_id": "` + conv + `", "message_id": "5ad4cb98-f0c7-4085-b384-88c403be6290", "task_id": "900bbd43-dc0b-4383-a372-aa6e6c414227", "created_at": 1705398420`
	write(w, "event: ping\n\n")
	write(w, `data: {"event": "message", "answer": "你好，", `+base+"}\n\n")
	write(w, `data: {"event": "agent_thought", "thought": "greet", "tool": "", "position": 1, `+base+"}\n\n")
	write(w, `data: {"event": "message", "answer": "`+a)
	write(w, b+`", `+base+"}\n\n")
	write(w, "event: ping\n\n")
	write(w, `data: {"event": "message_end", "id": "5e52ce04-874b-4d27-9045-b3bc80def685", `+base+`, "metadata": {"usage": {"prompt_tokens": 1033, "completion_tokens": 135, "total_tokens": 1168}}}`+"\n\n")
}

// forget drops a conversation, as deleting it in Dify does.
func (f *fakeDify) forget(conv string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conversations, conv)
}

func (f *fakeDify) setAnswer(answer func(w http.ResponseWriter, conv string, body map[string]any)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = answer
}

func (f *fakeDify) backend(t *testing.T, sessions Sessions, cfg DifyConfig) Backend {
	t.Helper()
	cfg.BaseURL = f.srv.URL + "/v1"
	if cfg.APIKeyFile == "" {
		cfg.APIKeyFile = secretFile(t, testDifyKey)
	}
	var opts []Option
	if sessions != nil {
		opts = append(opts, WithSessions(sessions))
	}
	b, err := newUnchained(Config{Kind: KindDify, Dify: cfg}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func difyQuestion(user, chat, q string) Request {
	return Request{TaskID: "t-" + q, Bot: "b1", Chat: chat, ChatType: "single", User: user, MsgID: "m-" + q,
		Messages: []Message{{Role: RoleUser, Content: "earlier"}, {Role: RoleAssistant, Content: "answer"}, {Role: RoleUser, Content: q}}}
}

// nodeSessions is one node's Sessions: its own connection to the shared
// JetStream, as another node of the cluster has.
func nodeSessions(t *testing.T, js *testenv.JetStream) *task.Sessions {
	t.Helper()
	store, _ := testenv.DeclareOnCluster(t, []string{js.Server.ClientURL()}, jetstream.Options{})
	return task.NewSessions(store.Context(), zerolog.Nop())
}

func TestDifyStream(t *testing.T) {
	leakCheck(t)
	f := newFakeDify(t)
	b := f.backend(t, nil, DifyConfig{})
	if !strings.HasPrefix(b.Name(), "dify:127.0.0.1:") {
		t.Errorf("Name() = %q, want dify:<host>", b.Name())
	}
	rec := newRecorder()
	if err := b.Stream(context.Background(), difyQuestion("alice", "alice", "你好"), rec.emit); err != nil {
		t.Fatal(err)
	}
	checkDeltas(t, rec.all())
	if got := strings.Join(rec.all(), "|"); got != "你好，|世界" {
		t.Errorf("deltas %q, want 你好，|世界", got)
	}
	got := f.next(t)
	if got.accept != "text/event-stream" || got.contentType != "application/json" {
		t.Errorf("Accept %q, Content-Type %q", got.accept, got.contentType)
	}
	want := `{"conversation_id":"","inputs":{},"query":"你好","response_mode":"streaming","user":"alice"}`
	if raw, _ := json.Marshal(got.body); string(raw) != want {
		t.Errorf("request %s, want %s (the question alone: Dify holds the memory)", raw, want)
	}
}

// TestDifyCardClickInputs: a task answering a click asks Dify with the
// choice in words as the query and inputs naming it, a plain button's
// and a card with choices' alike.
func TestDifyCardClickInputs(t *testing.T) {
	leakCheck(t)
	f := newFakeDify(t)
	b := f.backend(t, nil, DifyConfig{})
	for _, c := range []struct {
		ev   Event
		want string
	}{
		{Event{Type: EventCardClick, TaskID: "t_owner", EventKey: "big", Selected: []Selection{}},
			`{"card_event_key":"big","card_selected":"","card_selected_items":"[]","card_task_id":"t_owner"}`},
		{Event{Type: EventCardClick, TaskID: "t_owner", EventKey: "book", Selected: []Selection{
			{QuestionKey: "room", OptionIDs: []string{"big", "small"}}, {QuestionKey: "day", OptionIDs: []string{"tue"}}}},
			`{"card_event_key":"book","card_selected":"big,small,tue","card_selected_items":"[{\"question_key\":\"room\",\"option_ids\":[\"big\",\"small\"]},{\"question_key\":\"day\",\"option_ids\":[\"tue\"]}]","card_task_id":"t_owner"}`},
	} {
		req := difyQuestion("alice", "alice", "大会议室")
		req.Event = &c.ev
		if err := streamQuiet(b, req); err != nil {
			t.Fatal(err)
		}
		got := f.next(t)
		if raw, _ := json.Marshal(got.body["inputs"]); string(raw) != c.want || got.body["query"] != "大会议室" {
			t.Errorf("inputs %s query %v, want %s and the choice in words", raw, got.body["query"], c.want)
		}
	}
}

// TestDifyConversationSurvivesFailover: the conversation Dify started for
// a user is continued by the next question, on another node, and by a
// question after the node's own memory of the turns was updated; another
// user of the same group chat has a conversation of their own; /new (the
// record purged) starts a new one; one Dify no longer knows is started
// anew in the same answer.
func TestDifyConversationSurvivesFailover(t *testing.T) {
	leakCheck(t)
	js := testenv.StartJetStream(t, jetstream.Options{})
	f := newFakeDify(t)
	node1 := f.backend(t, nodeSessions(t, js), DifyConfig{})
	node2 := f.backend(t, nodeSessions(t, js), DifyConfig{})
	ask := func(b Backend, user, chat, q string) string {
		t.Helper()
		if err := streamQuiet(b, difyQuestion(user, chat, q)); err != nil {
			t.Fatalf("%s asks %q: %v", user, q, err)
		}
		conv, _ := f.next(t).body["conversation_id"].(string)
		return conv
	}

	if conv := ask(node1, "alice", "group1", "q1"); conv != "" {
		t.Fatalf("first question sent conversation_id %q, want \"\"", conv)
	}
	first := "45701982-8118-4bc5-8e9b-000000000001"
	if conv := ask(node2, "alice", "group1", "q2"); conv != first {
		t.Fatalf("the next question, on another node, sent conversation_id %q, want %q", conv, first)
	}
	// The worker appends the exchange to the same record: the id stays.
	key := jetstream.ConversationKey("b1", "group1")
	if err := task.AppendExchange(context.Background(), js.Store.Context(), key, "q2", "a2", task.Memory{Turns: 20, Bytes: 16 << 10}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if conv := ask(node1, "alice", "group1", "q3"); conv != first {
		t.Fatalf("after the turns were appended: conversation_id %q, want %q", conv, first)
	}
	if conv := ask(node1, "bob", "group1", "q4"); conv != "" {
		t.Fatalf("another user of the group sent conversation_id %q, want a new conversation", conv)
	}
	if conv := ask(node2, "bob", "group1", "q5"); conv == "" || conv == first {
		t.Fatalf("bob's next question sent conversation_id %q, want his own", conv)
	}

	// /new purges the conversation's record.
	if err := js.Store.Context().Purge(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if conv := ask(node2, "alice", "group1", "q6"); conv != "" {
		t.Fatalf("after /new: conversation_id %q, want a new conversation", conv)
	}
	third := "45701982-8118-4bc5-8e9b-000000000003"
	if conv := ask(node1, "alice", "group1", "q7"); conv != third {
		t.Fatalf("after /new, the next question: conversation_id %q, want %q", conv, third)
	}

	// Deleted in Dify: 404, then a new conversation in the same answer.
	f.forget(third)
	rec := newRecorder()
	if err := node2.Stream(context.Background(), difyQuestion("alice", "group1", "q8"), rec.emit); err != nil {
		t.Fatal(err)
	}
	if rec.text() != "你好，世界" {
		t.Errorf("answer after a 404 %q", rec.text())
	}
	if conv, _ := f.next(t).body["conversation_id"].(string); conv != third {
		t.Errorf("first request sent %q, want the stored %q", conv, third)
	}
	if conv, _ := f.next(t).body["conversation_id"].(string); conv != "" {
		t.Errorf("after the 404 the request sent %q, want \"\"", conv)
	}
	if conv := ask(node1, "alice", "group1", "q9"); conv != "45701982-8118-4bc5-8e9b-000000000004" {
		t.Errorf("after the new conversation: %q, want its id", conv)
	}
}

func TestDifyHTTPErrors(t *testing.T) {
	leakCheck(t)
	for _, tc := range []struct {
		status      int
		code, msg   string
		want        error
		says        []string
		wrongAPIKey bool
	}{
		{500, "internal_server_error", "The server encountered an internal error", ErrBackend, []string{"HTTP 500", "internal error"}, false},
		{429, "too_many_requests", "Too many requests", ErrBackend, []string{"HTTP 429"}, false},
		{503, "s3_connection_failed", "unavailable", ErrBackend, []string{"HTTP 503"}, false},
		{400, "provider_quota_exceeded", "Your quota for Dify Hosted Model Provider has been exhausted", ErrBadRequest, []string{"HTTP 400", "provider_quota_exceeded", "quota"}, false},
		{400, "app_unavailable", "App unavailable, please check your app configurations.", ErrBadRequest, []string{"app_unavailable"}, false},
		{401, "", "", ErrBadRequest, []string{"HTTP 401", "ai.dify.api_key_file", "Access token is invalid"}, true},
	} {
		t.Run(fmt.Sprint(tc.status, tc.code), func(t *testing.T) {
			f := newFakeDify(t)
			if !tc.wrongAPIKey {
				f.webServer = newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
					difyRefuse(w, tc.status, tc.code, tc.msg+" "+testDifyKey)
				})
			}
			cfg := DifyConfig{}
			if tc.wrongAPIKey {
				cfg.APIKeyFile = secretFile(t, "app-wrong-key-0123456")
			}
			err := streamQuiet(f.backend(t, nil, cfg), difyQuestion("alice", "alice", "q"))
			checkError(t, err, tc.want, tc.says, testDifyKey, "app-wrong-key-0123456")
			if n := len(f.requests); n != 1 {
				t.Errorf("%d requests, want 1 (no retries in the backend)", n)
			}
		})
	}
}

// TestDifyStreamFailures: an error event, a stream that stops before
// message_end, a cut, and output moderation replacing a begun answer.
func TestDifyStreamFailures(t *testing.T) {
	leakCheck(t)
	msg := func(w http.ResponseWriter, conv, answer string) {
		sendDifyEvent(w, map[string]any{"event": "message", "conversation_id": conv, "message_id": "m1", "answer": answer, "created_at": 1705398420})
	}
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, conv string)
		want   error
		says   []string
		text   string
	}{
		{"error event 500", func(w http.ResponseWriter, conv string) {
			msg(w, conv, "half ")
			sendDifyEvent(w, map[string]any{"event": "error", "task_id": "t", "message_id": "m1", "status": 500, "code": "internal_server_error", "message": "model crashed"})
		}, ErrBackend, []string{"status 500", "model crashed"}, "half "},
		{"error event 400", func(w http.ResponseWriter, conv string) {
			sendDifyEvent(w, map[string]any{"event": "error", "task_id": "t", "message_id": "m1", "status": 400, "code": "completion_request_error", "message": "bad prompt"})
		}, ErrBadRequest, []string{"completion_request_error", "bad prompt"}, ""},
		{"no message_end", func(w http.ResponseWriter, conv string) {
			msg(w, conv, "half ")
		}, ErrBackend, []string{"message_end"}, "half "},
		{"cut", func(w http.ResponseWriter, conv string) {
			msg(w, conv, "half ")
			cut(w)
		}, ErrBackend, []string{"cut"}, "half "},
		{"not JSON", func(w http.ResponseWriter, conv string) {
			msg(w, conv, "half ")
			write(w, "data: {broken\n\n")
		}, ErrBackend, []string{"not a JSON event"}, "half "},
		{"moderation after output", func(w http.ResponseWriter, conv string) {
			msg(w, conv, "half ")
			sendDifyEvent(w, map[string]any{"event": "message_replace", "conversation_id": conv, "answer": "I cannot answer that."})
		}, ErrBadRequest, []string{"moderation"}, "half "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDify(t)
			f.setAnswer(func(w http.ResponseWriter, conv string, _ map[string]any) { tc.answer(w, conv) })
			rec := newRecorder()
			err := f.backend(t, nil, DifyConfig{}).Stream(context.Background(), difyQuestion("alice", "alice", "q"), rec.emit)
			checkError(t, err, tc.want, tc.says, testDifyKey)
			if rec.text() != tc.text {
				t.Errorf("emitted %q, want %q", rec.text(), tc.text)
			}
		})
	}

	// Moderation before any output: the preset reply is the answer.
	f := newFakeDify(t)
	f.setAnswer(func(w http.ResponseWriter, conv string, _ map[string]any) {
		sendDifyEvent(w, map[string]any{"event": "message_replace", "conversation_id": conv, "answer": "I cannot answer that."})
		sendDifyEvent(w, map[string]any{"event": "message_end", "conversation_id": conv})
	})
	rec := newRecorder()
	if err := f.backend(t, nil, DifyConfig{}).Stream(context.Background(), difyQuestion("alice", "alice", "q"), rec.emit); err != nil || rec.text() != "I cannot answer that." {
		t.Errorf("message_replace first: %v, answer %q", err, rec.text())
	}
}

func TestDifyRefusedTimeoutCancel(t *testing.T) {
	leakCheck(t)
	b, err := newUnchained(Config{Kind: KindDify, Dify: DifyConfig{BaseURL: refusedURL(t) + "/v1", APIKeyFile: secretFile(t, testDifyKey)}})
	if err != nil {
		t.Fatal(err)
	}
	checkError(t, streamQuiet(b, difyQuestion("alice", "alice", "q")), ErrBackend, []string{"refused"}, testDifyKey)

	f := newFakeDify(t)
	f.setAnswer(func(w http.ResponseWriter, conv string, _ map[string]any) {
		sendDifyEvent(w, map[string]any{"event": "agent_message", "conversation_id": conv, "answer": "thinking"})
		for {
			select {
			case <-f.release:
				return
			case <-time.After(50 * time.Millisecond):
				write(w, "event: ping\n\n") // alive, but no answer
			}
		}
	})
	rec := newRecorder()
	err = f.backend(t, nil, DifyConfig{Timeout: 300 * time.Millisecond}).Stream(context.Background(), difyQuestion("alice", "alice", "q"), rec.emit)
	checkError(t, err, ErrTimeout, []string{"ai.dify.timeout"}, testDifyKey)
	if rec.text() != "thinking" {
		t.Errorf("emitted %q", rec.text())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec = newRecorder()
	wait := streamAsync(t, ctx, f.backend(t, nil, DifyConfig{}), difyQuestion("alice", "alice", "q"), rec)
	rec.waitFor(t, "thinking")
	cancel()
	took, err := wait()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Stream: %v, want context.Canceled", err)
	}
	if took > prompt {
		t.Errorf("Stream returned %s after cancel", took)
	}
}

func TestDifyConfigErrors(t *testing.T) {
	open := secretFile(t, testDifyKey)
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  DifyConfig
		key  string
		says string
	}{
		{DifyConfig{}, "ai.dify.api_key_file", "required"},
		{DifyConfig{APIKeyFile: "/no/such/key"}, "ai.dify.api_key_file", "no such file"},
		{DifyConfig{APIKeyFile: open}, "ai.dify.api_key_file", "chmod 600"},
		{DifyConfig{APIKeyFile: open, BaseURL: "dify.example.com/v1"}, "ai.dify.base_url", "not an http(s) URL"},
		{DifyConfig{APIKeyFile: open, BaseURL: "http://dify.example.com/v1"}, "ai.dify.base_url", "clear text"},
		{DifyConfig{APIKeyFile: open, Timeout: -time.Second}, "ai.dify.timeout", "negative"},
	} {
		_, err := New(Config{Kind: KindDify, Dify: tc.cfg})
		if err == nil || !strings.Contains(err.Error(), "config key "+tc.key+":") || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("New(%+v) = %v, want an error naming %s, saying %q", tc.cfg, err, tc.key, tc.says)
		}
		if err != nil && strings.Contains(err.Error(), testDifyKey) {
			t.Errorf("New(%+v): %v shows the key", tc.cfg, err)
		}
	}
	b, err := newUnchained(Config{Kind: KindDify, Dify: DifyConfig{APIKeyFile: secretFile(t, testDifyKey)}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "dify:api.dify.ai" {
		t.Errorf("Name() = %q, want dify:api.dify.ai (the default base_url's host)", b.Name())
	}
}

// TestDifyDocExample replays docs/ai.md's Dify exchange: with the
// conversation Dify holds for the user stored, the request botctl sends is
// the one shown; the stream shown gives the answer and the usage the docs
// name, and its conversation_id stays stored for the user.
func TestDifyDocExample(t *testing.T) {
	leakCheck(t)
	js := testenv.StartJetStream(t, jetstream.Options{})
	const conv = "45701982-8118-4bc5-8e9b-dcd85c2b1dd3"
	sessions := nodeSessions(t, js)
	f := newFakeDify(t)
	f.mu.Lock()
	f.conversations[conv] = "zhangsan"
	f.mu.Unlock()
	response := docExample(t, "dify response")
	f.setAnswer(func(w http.ResponseWriter, _ string, _ map[string]any) {
		for _, line := range strings.SplitAfter(response, "\n") { // a stream, not one write
			write(w, line)
		}
	})
	b := f.backend(t, sessions, DifyConfig{})
	if err := sessions.SetSession(context.Background(), "b1", "group1", "zhangsan", b.Name(), conv); err != nil {
		t.Fatal(err)
	}
	req := Request{TaskID: "t1", Bot: "b1", Chat: "group1", ChatType: "group", User: "zhangsan", MsgID: "m1",
		Messages: []Message{{Role: RoleUser, Content: "会议改到几点了？"}}}
	ctx, used := WithUsage(context.Background())
	rec := newRecorder()
	if err := b.Stream(ctx, req, rec.emit); err != nil {
		t.Fatal(err)
	}
	if got := rec.text(); got != "改到了周三 16:00。" {
		t.Errorf("answer %q, want the docs' 改到了周三 16:00。", got)
	}
	if u, ok := used(); !ok || u != (Usage{In: 1033, Out: 12}) {
		t.Errorf("usage %+v (reported %v), want the docs' 1033 in, 12 out", u, ok)
	}
	var want, sent any
	if err := json.Unmarshal([]byte(docExample(t, "dify request")), &want); err != nil {
		t.Fatalf("the documented request is not JSON: %v", err)
	}
	got := f.next(t)
	if err := json.Unmarshal(got.raw, &sent); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sent, want) {
		t.Errorf("request sent\n%s\nnot the documented one\n%s", got.raw, docExample(t, "dify request"))
	}
	if id, err := sessions.Session(context.Background(), "b1", "group1", "zhangsan", b.Name()); err != nil || id != conv {
		t.Errorf("stored conversation %q (%v), want %q", id, err, conv)
	}
}
