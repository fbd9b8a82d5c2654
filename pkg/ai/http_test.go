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
	"testing"
	"time"
)

const testToken = "tok-http-0123456789abcdef"

// webhookPath stands for an n8n webhook's path, which is its secret.
const webhookPath = "/webhook/6f1c2a9e-secret-path"

func httpBackendFor(t *testing.T, s *webServer, cfg HTTPConfig) Backend {
	t.Helper()
	cfg.URL = s.srv.URL + webhookPath
	if cfg.TokenFile == "" {
		cfg.TokenFile = secretFile(t, testToken)
	}
	b, err := newUnchained(Config{Kind: KindHTTP, HTTP: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// docRequest is the task behind the request docs/ai.md shows.
func docRequest() Request {
	return Request{TaskID: "t-doc", Bot: "sales-bot", Chat: "wrkSFfCgAAqVx2dZ", ChatType: "group", User: "zhangsan",
		MsgID: "CAIQ16HMjQYYwNGagIOAgAMgq4KM0AI=",
		Messages: []Message{
			{Role: RoleSystem, Content: "You answer WeCom users."},
			{Role: RoleUser, Content: "帮我记一下：周三下午三点开会"},
			{Role: RoleAssistant, Content: "好的，已记下：周三 15:00 开会。"},
			{Role: RoleUser, Content: "会议改到几点了？"},
		},
		Attachments: []Attachment{{Kind: "image", Name: "notice.png", MIME: "image/png", Size: 48213, Width: 1080, Height: 720,
			Path: "/var/lib/botctl/media/CAIQ16HMjQYYwNGagIOAgAMgq4KM0AI=-0.png"}},
	}
}

// TestHTTPDocExample replays docs/ai.md's example: the request botctl
// sends is the one shown, and both answers shown (an event stream and a
// plain-text body) stream into the answer shown.
func TestHTTPDocExample(t *testing.T) {
	leakCheck(t)
	events := docExample(t, "http response: text/event-stream")
	plain := strings.TrimSuffix(docExample(t, "http response: text/plain"), "\n")
	for _, tc := range []struct{ contentType, body string }{
		{"text/event-stream", events},
		{"text/plain; charset=utf-8", plain},
	} {
		t.Run(tc.contentType, func(t *testing.T) {
			s := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
				w.Header().Set("Content-Type", tc.contentType)
				// Line by line, flushed: a stream, not one write.
				for _, line := range strings.SplitAfter(tc.body, "\n") {
					write(w, line)
				}
			})
			b := httpBackendFor(t, s, HTTPConfig{})
			rec := newRecorder()
			if err := b.Stream(context.Background(), docRequest(), rec.emit); err != nil {
				t.Fatal(err)
			}
			checkDeltas(t, rec.all())
			if rec.text() != plain {
				t.Errorf("answer %q, want %q", rec.text(), plain)
			}

			got := s.next(t)
			if got.method != http.MethodPost || got.path != webhookPath {
				t.Errorf("request %s %s, want POST %s", got.method, got.path, webhookPath)
			}
			if got.auth != "Bearer "+testToken || got.contentType != "application/json" {
				t.Errorf("Authorization %q, Content-Type %q", got.auth, got.contentType)
			}
			if !strings.Contains(got.accept, "text/event-stream") || !strings.Contains(got.accept, "text/plain") {
				t.Errorf("Accept %q, want both answer types", got.accept)
			}
			var want any
			if err := json.Unmarshal([]byte(docExample(t, "http request")), &want); err != nil {
				t.Fatalf("the documented request is not JSON: %v", err)
			}
			var sent any
			if err := json.Unmarshal(got.raw, &sent); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(sent, want) {
				t.Errorf("request sent\n%s\nnot the documented one\n%s", got.raw, docExample(t, "http request"))
			}
		})
	}
}

// TestHTTPStreamSplitRunes: a rune split between two writes of the body,
// inside an event's line or a plain body, still reaches emit whole; the
// replies of several lines add up (the docs' example among them);
// {"done": true} ends the answer without waiting for the body to end.
func TestHTTPStreamSplitRunes(t *testing.T) {
	leakCheck(t)
	a, b := splitRune("世界")
	t.Run("event-stream", func(t *testing.T) {
		var s *webServer
		s = newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
			eventStream(w)
			write(w, `data: {"text": "你好，`+a)
			write(w, b+`"}`+"\n\n")
			write(w, `data: {"reply": {"card": {"card_type": "text_notice"}}}`+"\n\n")
			write(w, "data: "+oneLine(docExample(t, "http reply"))+"\n\n")
			write(w, `data: {"text": "！", "done": true}`+"\n\n")
			s.stall(r) // the body never ends: done is the end
		})
		rec := newRecorder()
		sink := &ReplySink{}
		if err := httpBackendFor(t, s, HTTPConfig{}).Stream(WithReplySink(context.Background(), sink), question("q"), rec.emit); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(rec.all(), "|"); got != "你好，世界|！" {
			t.Errorf("deltas %q, want 你好，世界|！", got)
		}
		r := sink.Reply()
		if len(r.Images) != 1 || r.Images[0].Name != "chart.png" || len(r.Images[0].Data) == 0 || len(r.Files) != 1 ||
			r.Files[0].Kind != "file" || string(r.Files[0].Data) != "hello" || !strings.Contains(string(r.Card), "button_interaction") {
			t.Errorf("reply %+v", r)
		}
		if _, err := CheckReplyImage("chart.png", r.Images[0].Data); err != nil {
			t.Errorf("the docs' image: %v", err)
		}
	})
	t.Run("plain", func(t *testing.T) {
		more := make(chan struct{})
		s := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			write(w, "你好，"+a)
			<-more // the rest once the client has emitted the first part
			write(w, b+"！")
		})
		rec := newRecorder()
		wait := streamAsync(t, context.Background(), httpBackendFor(t, s, HTTPConfig{}), question("q"), rec)
		rec.waitFor(t, "你好，")
		close(more)
		if _, err := wait(); err != nil {
			t.Fatal(err)
		}
		checkDeltas(t, rec.all())
		if got := strings.Join(rec.all(), "|"); got != "你好，|世界！" {
			t.Errorf("deltas %q, want 你好，|世界！ (the split rune held back, then whole)", got)
		}
	})
}

func TestHTTPNoToken(t *testing.T) {
	leakCheck(t)
	s := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
		w.Header().Set("Content-Type", "text/plain")
		write(w, "ok")
	})
	b, err := newUnchained(Config{Kind: KindHTTP, HTTP: HTTPConfig{URL: s.srv.URL + "/answer"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := streamQuiet(b, question("q")); err != nil {
		t.Fatal(err)
	}
	if got := s.next(t); got.auth != "" {
		t.Errorf("Authorization %q without ai.http.token_file", got.auth)
	}
}

func TestHTTPStatusErrors(t *testing.T) {
	leakCheck(t)
	for _, tc := range []struct {
		status int
		body   string
		want   error
		says   []string
	}{
		{500, `{"error": "workflow crashed"}`, ErrBackend, []string{"HTTP 500", "workflow crashed"}},
		{502, "Bad Gateway", ErrBackend, []string{"HTTP 502"}},
		{503, "", ErrBackend, []string{"HTTP 503"}},
		{429, `{"message": "slow down"}`, ErrBackend, []string{"HTTP 429", "slow down"}},
		{400, `{"error": {"message": "question missing"}}`, ErrBadRequest, []string{"HTTP 400", "question missing"}},
		{404, "The requested webhook " + webhookPath + " is not registered.", ErrBadRequest, []string{"HTTP 404", "not registered"}},
		{401, "invalid token " + testToken, ErrBadRequest, []string{"HTTP 401", "ai.http.token_file"}},
		{403, "", ErrBadRequest, []string{"HTTP 403", "ai.http.token_file"}},
		{307, "", ErrBadRequest, []string{"HTTP 307", "redirects are not followed"}},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			s := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
				if tc.status == 307 {
					w.Header().Set("Location", "http://10.0.0.9/elsewhere")
				}
				w.WriteHeader(tc.status)
				write(w, tc.body)
			})
			b := httpBackendFor(t, s, HTTPConfig{})
			rec := newRecorder()
			err := b.Stream(context.Background(), question("q"), rec.emit)
			checkError(t, err, tc.want, tc.says, testToken, webhookPath)
			if n := len(s.requests); n != 1 {
				t.Errorf("%d requests, want 1 (no retries in the backend)", n)
			}
			if len(rec.all()) != 0 {
				t.Errorf("emitted %q", rec.all())
			}
		})
	}
}

// TestHTTPCutAndMalformed: an answer that stops before its end, whichever
// way, fails retryably with what came before it emitted; a stream that is
// not the documented one fails too.
func TestHTTPCutAndMalformed(t *testing.T) {
	leakCheck(t)
	for _, tc := range []struct {
		name   string
		handle func(w http.ResponseWriter)
		want   error
		says   string
	}{
		{"events cut", func(w http.ResponseWriter) {
			eventStream(w)
			write(w, `data: {"text": "half "}`+"\n\n")
			cut(w)
		}, ErrBackend, "cut"},
		{"events without done", func(w http.ResponseWriter) {
			closeDelimited(w, "text/event-stream", `data: {"text": "half "}`+"\n\n")
		}, ErrBackend, `"done": true`},
		{"plain cut", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/plain")
			write(w, "half ")
			cut(w)
		}, ErrBackend, "cut"},
		{"plain short of its length", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Length", "100")
			write(w, "half ")
			cut(w)
		}, ErrBackend, "cut"},
		{"not JSON", func(w http.ResponseWriter) {
			eventStream(w)
			write(w, `data: {"text": "half "}`+"\n\n")
			write(w, "data: half of a line\n\n")
		}, ErrBackend, "not a JSON object"},
		{"a line too long", func(w http.ResponseWriter) {
			eventStream(w)
			write(w, `data: {"text": "half "}`+"\n\n")
			write(w, `data: {"text": "`+strings.Repeat("x", 2<<20))
		}, ErrBackend, "longer than"},
		{"another content type", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			write(w, `{"text": "half "}`)
		}, ErrBadRequest, "text/event-stream or text/plain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) { tc.handle(w) })
			rec := newRecorder()
			err := httpBackendFor(t, s, HTTPConfig{}).Stream(context.Background(), question("q"), rec.emit)
			checkError(t, err, tc.want, []string{tc.says}, testToken, webhookPath)
			if tc.want == ErrBackend && rec.text() != "half " {
				t.Errorf("emitted %q before the failure, want \"half \"", rec.text())
			}
		})
	}
}

func TestHTTPRefused(t *testing.T) {
	leakCheck(t)
	url := refusedURL(t) + webhookPath
	b, err := newUnchained(Config{Kind: KindHTTP, HTTP: HTTPConfig{URL: url, TokenFile: secretFile(t, testToken)}})
	if err != nil {
		t.Fatal(err)
	}
	checkError(t, streamQuiet(b, question("q")), ErrBackend, []string{"refused"}, testToken, webhookPath)
}

func TestHTTPTimeoutAndCancel(t *testing.T) {
	leakCheck(t)
	var s *webServer
	s = newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
		eventStream(w)
		write(w, `data: {"text": "thinking"}`+"\n\n")
		s.stall(r)
	})
	rec := newRecorder()
	err := httpBackendFor(t, s, HTTPConfig{Timeout: 300 * time.Millisecond}).Stream(context.Background(), question("q"), rec.emit)
	checkError(t, err, ErrTimeout, []string{"ai.http.timeout"})
	if rec.text() != "thinking" {
		t.Errorf("emitted %q", rec.text())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec = newRecorder()
	wait := streamAsync(t, ctx, httpBackendFor(t, s, HTTPConfig{}), question("q"), rec)
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

func TestHTTPEmitErrorStops(t *testing.T) {
	leakCheck(t)
	var s *webServer
	s = newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
		eventStream(w)
		write(w, `data: {"text": "x"}`+"\n\n")
		write(w, `data: {"text": "y"}`+"\n\n")
		s.stall(r)
	})
	errFull := errors.New("storage full")
	rec := newRecorder()
	rec.fail = errFull
	if err := httpBackendFor(t, s, HTTPConfig{}).Stream(context.Background(), question("q"), rec.emit); err != errFull {
		t.Fatalf("Stream: %v, want emit's error unchanged", err)
	}
	if n := len(rec.all()); n != 1 {
		t.Errorf("%d emits, want 1", n)
	}
}

// TestHTTPNameHoldsNoSecret: Name is the kind and the host: not the
// webhook's path, not the token.
func TestHTTPNameHoldsNoSecret(t *testing.T) {
	b, err := newUnchained(Config{Kind: KindHTTP, HTTP: HTTPConfig{URL: "https://n8n.example.com" + webhookPath, TokenFile: secretFile(t, testToken)}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "http:n8n.example.com" {
		t.Errorf("Name() = %q, want http:n8n.example.com", b.Name())
	}
}

func TestHTTPConfigErrors(t *testing.T) {
	open := secretFile(t, testToken)
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  HTTPConfig
		key  string
		says string
	}{
		{HTTPConfig{}, "ai.http.url", "required"},
		{HTTPConfig{URL: "n8n.example.com" + webhookPath}, "ai.http.url", "not an http(s) URL"},
		{HTTPConfig{URL: "http://n8n.example.com" + webhookPath}, "ai.http.url", "clear text"},
		{HTTPConfig{URL: "https://n8n.example.com", Timeout: -1}, "ai.http.timeout", "negative"},
		{HTTPConfig{URL: "https://n8n.example.com", TokenFile: "/no/such/file"}, "ai.http.token_file", "no such file"},
		{HTTPConfig{URL: "https://n8n.example.com", TokenFile: open}, "ai.http.token_file", "chmod 600"},
	} {
		_, err := New(Config{Kind: KindHTTP, HTTP: tc.cfg})
		if err == nil || !strings.Contains(err.Error(), "config key "+tc.key+":") || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("New(%+v) = %v, want an error naming %s, saying %q", tc.cfg, err, tc.key, tc.says)
			continue
		}
		if strings.Contains(err.Error(), webhookPath) || strings.Contains(err.Error(), testToken) {
			t.Errorf("New(%+v): %v shows a secret", tc.cfg, err)
		}
	}
	// Plain http to this machine is fine.
	if _, err := New(Config{Kind: KindHTTP, HTTP: HTTPConfig{URL: "http://127.0.0.1:5678" + webhookPath}}); err != nil {
		t.Errorf("loopback http: %v", err)
	}
}

// oneLine is a JSON document on one line (an event's data line).
func oneLine(doc string) string {
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		panic(err)
	}
	raw, _ := json.Marshal(v)
	return string(raw)
}

// A "reply" that is not a reply object, or that names a path on this
// node, fails the answer (ErrBackend) saying what to send instead.
func TestHTTPReplyRefused(t *testing.T) {
	leakCheck(t)
	for _, line := range []string{`{"reply": "a card"}`, `{"reply": {"files": [{"name": "x", "path": "/etc/passwd"}]}}`} {
		s := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
			eventStream(w)
			write(w, "data: "+line+"\n\n")
			write(w, `data: {"done": true}`+"\n\n")
		})
		err := httpBackendFor(t, s, HTTPConfig{}).Stream(WithReplySink(context.Background(), &ReplySink{}), question("q"), newRecorder().emit)
		if !errors.Is(err, ErrBackend) || !strings.Contains(err.Error(), "reply") {
			t.Errorf("%s: %v, want ErrBackend about the reply", line, err)
		}
	}
}

// TestHTTPCardClickDocExample replays docs/ai.md's card clicks, of a
// plain button and of a card with choices: a task answering a click
// POSTs the documented body, "event" beside the conversation's fields.
func TestHTTPCardClickDocExample(t *testing.T) {
	leakCheck(t)
	s := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
		w.Header().Set("Content-Type", "text/plain")
		write(w, "好的，已订大会议室。")
	})
	for _, c := range []struct {
		example, msgid, asked, choice, key string
		selected                           []Selection
	}{
		{"http card click request", "CAIQ16HMjQYYwNGagIOAgAMgq4KM0AI=", "订哪一间？", "大会议室", "big", []Selection{}},
		{"http card click request with choices", "CAIQ16HMjQYYwNGagIOAgAMgxYSM0AI=", "订哪几间？", "大会议室、小会议室（预订）", "book",
			[]Selection{{QuestionKey: "room", OptionIDs: []string{"big", "small"}}}},
	} {
		req := Request{TaskID: "t_click", Bot: "sales-bot", Chat: "zhangsan", ChatType: "single", User: "zhangsan",
			MsgID: c.msgid,
			Messages: []Message{
				{Role: RoleUser, Content: "帮我订个会议室"},
				{Role: RoleAssistant, Content: c.asked},
				{Role: RoleUser, Content: c.choice},
			},
			Event: &Event{Type: EventCardClick, TaskID: "t_0cb06704b74010e77c3f5633", EventKey: c.key, Selected: c.selected}}
		rec := newRecorder()
		if err := httpBackendFor(t, s, HTTPConfig{}).Stream(context.Background(), req, rec.emit); err != nil {
			t.Fatal(err)
		}
		var want, sent any
		if err := json.Unmarshal([]byte(docExample(t, c.example)), &want); err != nil {
			t.Fatalf("the documented request %q is not JSON: %v", c.example, err)
		}
		got := s.next(t)
		if err := json.Unmarshal(got.raw, &sent); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(sent, want) {
			t.Errorf("request sent\n%s\nnot the documented one %q\n%s", got.raw, c.example, docExample(t, c.example))
		}
		if rec.text() != "好的，已订大会议室。" {
			t.Errorf("answer %q", rec.text())
		}
	}
}
