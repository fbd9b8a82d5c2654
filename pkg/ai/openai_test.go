package ai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const testKey = "sk-test-0123456789abcdef"

// fakeOpenAI is an OpenAI-compatible server; handle serves
// /v1/chat/completions. Requests' bodies are kept for checks.
type fakeOpenAI struct {
	srv      *httptest.Server
	requests chan capturedRequest
	release  chan struct{} // closed at cleanup: stalled handlers return
}

type capturedRequest struct {
	method, path, auth string
	body               map[string]any
}

func newFakeOpenAI(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI)) *fakeOpenAI {
	t.Helper()
	f := &fakeOpenAI{requests: make(chan capturedRequest, 16), release: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		c := capturedRequest{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization")}
		_ = json.Unmarshal(raw, &c.body)
		select {
		case f.requests <- c:
		default:
		}
		handle(w, r, f)
	}))
	t.Cleanup(func() {
		close(f.release)
		f.srv.Close()
	})
	return f
}

func (f *fakeOpenAI) backend(t *testing.T, cfg OpenAIConfig) Backend {
	t.Helper()
	cfg.BaseURL = f.srv.URL + "/v1"
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	cfg.APIKeyEnv = "AI_TEST_OPENAI_KEY"
	t.Setenv("AI_TEST_OPENAI_KEY", testKey)
	b, err := newUnchained(Config{Kind: KindOpenAI, OpenAI: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func chunkJSON(content, finish string) string {
	delta := map[string]any{}
	if content != "" {
		delta["content"] = content
	}
	choice := map[string]any{"index": 0, "delta": delta, "finish_reason": nil}
	if finish != "" {
		choice["finish_reason"] = finish
	}
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
		"model": "test-model", "choices": []any{choice},
	})
	return string(b)
}

func sseHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

func sendEvent(w http.ResponseWriter, data string) {
	fmt.Fprintf(w, "data: %s\n\n", data)
	w.(http.Flusher).Flush()
}

func apiError(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": message, "type": "invalid_request_error", "code": nil, "param": nil}})
	w.Write(b)
}

func TestOpenAIStream(t *testing.T) {
	leakCheck(t)
	f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
		sseHeaders(w)
		// The role-only first chunk real servers send.
		sendEvent(w, `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"test-model","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`)
		for _, c := range []string{"Hel", "lo", "，世界"} {
			sendEvent(w, chunkJSON(c, ""))
		}
		sendEvent(w, chunkJSON("", "stop"))
		sendEvent(w, "[DONE]")
	})
	b := f.backend(t, OpenAIConfig{Model: "gpt-test", SystemPrompt: "You answer WeCom users."})
	if b.Name() != "openai:gpt-test" {
		t.Errorf("Name() = %q", b.Name())
	}
	req := Request{TaskID: "t1", Messages: []Message{
		{Role: RoleUser, Content: "q1"},
		{Role: RoleAssistant, Content: "a1"},
		{Role: RoleUser, Content: "q2"},
	}}
	rec := newRecorder()
	if err := b.Stream(context.Background(), req, rec.emit); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(rec.all(), "|"), "Hel|lo|，世界"; got != want {
		t.Errorf("deltas %q, want %q", got, want)
	}

	c := <-f.requests
	if c.method != http.MethodPost || c.path != "/v1/chat/completions" {
		t.Errorf("request %s %s, want POST /v1/chat/completions", c.method, c.path)
	}
	if c.auth != "Bearer "+testKey {
		t.Errorf("Authorization %q", c.auth)
	}
	if c.body["model"] != "gpt-test" || c.body["stream"] != true {
		t.Errorf("body model=%v stream=%v, want gpt-test, true", c.body["model"], c.body["stream"])
	}
	msgs, _ := json.Marshal(c.body["messages"])
	want := `[{"content":"You answer WeCom users.","role":"system"},{"content":"q1","role":"user"},{"content":"a1","role":"assistant"},{"content":"q2","role":"user"}]`
	if string(msgs) != want {
		t.Errorf("messages\n%s\nwant\n%s", msgs, want)
	}
}

func TestOpenAIHTTPErrors(t *testing.T) {
	leakCheck(t)
	for _, tc := range []struct {
		status    int
		message   string
		sentinel  error
		retryable bool
		says      []string
	}{
		{500, "The server had an error", ErrBackend, true, []string{"HTTP 500", "The server had an error"}},
		{503, "overloaded", ErrBackend, true, []string{"HTTP 503"}},
		{429, "Rate limit reached", ErrBackend, true, []string{"HTTP 429", "Rate limit"}},
		{400, "Invalid value for 'messages'", ErrBadRequest, false, []string{"HTTP 400", "Invalid value"}},
		{401, "Incorrect API key provided: " + testKey, ErrBadRequest, false, []string{"HTTP 401", "AI_TEST_OPENAI_KEY", "ai.openai.api_key_env"}},
		{404, "The model `nope` does not exist", ErrBadRequest, false, []string{"HTTP 404", "does not exist"}},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
				apiError(w, tc.status, tc.message)
			})
			b := f.backend(t, OpenAIConfig{})
			rec := newRecorder()
			err := b.Stream(context.Background(), question("q"), rec.emit)
			if !errors.Is(err, tc.sentinel) || Retryable(err) != tc.retryable {
				t.Fatalf("Stream: %v, want %v (retryable %v)", err, tc.sentinel, tc.retryable)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if strings.Contains(err.Error(), testKey) {
				t.Errorf("error %q shows the API key", err)
			}
			if n := len(f.requests); n != 1 {
				t.Errorf("%d requests, want 1 (no retries in the SDK)", n)
			}
			if len(rec.all()) != 0 {
				t.Errorf("emitted %q", rec.all())
			}
		})
	}
}

// TestOpenAISlowStreamCancel: chunks with gaps; cancel mid-way returns
// promptly with what came so far delivered.
func TestOpenAISlowStreamCancel(t *testing.T) {
	leakCheck(t)
	f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
		sseHeaders(w)
		for i := 0; ; i++ {
			sendEvent(w, chunkJSON(fmt.Sprintf("part%d ", i), ""))
			select {
			case <-r.Context().Done():
				return
			case <-f.release:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	b := f.backend(t, OpenAIConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := newRecorder()
	wait := streamAsync(t, ctx, b, question("q"), rec)
	rec.waitFor(t, "part2 ")
	cancel()
	took, err := wait()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Stream: %v, want context.Canceled", err)
	}
	if took > prompt {
		t.Errorf("Stream returned %s after cancel", took)
	}
	if !strings.HasPrefix(rec.text(), "part0 part1 part2 ") {
		t.Errorf("emitted %q", rec.text())
	}
}

func TestOpenAITimeout(t *testing.T) {
	leakCheck(t)
	f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
		sseHeaders(w)
		sendEvent(w, chunkJSON("thinking", ""))
		select {
		case <-r.Context().Done():
		case <-f.release:
		}
	})
	b := f.backend(t, OpenAIConfig{Timeout: 300 * time.Millisecond})
	rec := newRecorder()
	err := b.Stream(context.Background(), question("q"), rec.emit)
	if !errors.Is(err, ErrTimeout) || !Retryable(err) {
		t.Fatalf("Stream: %v, want ErrTimeout", err)
	}
	if !strings.Contains(err.Error(), "ai.openai.timeout") {
		t.Errorf("error %q does not name the key", err)
	}
	if rec.text() != "thinking" {
		t.Errorf("emitted %q", rec.text())
	}
}

// TestOpenAIConnectionCut: the server drops the connection mid-answer,
// inside a chunked body (the client sees an unexpected EOF) or in a body
// that ends at close (the client sees a clean EOF and no finish_reason).
func TestOpenAIConnectionCut(t *testing.T) {
	leakCheck(t)
	t.Run("chunked", func(t *testing.T) {
		f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
			sseHeaders(w)
			sendEvent(w, chunkJSON("half ", ""))
			sendEvent(w, chunkJSON("an answer", ""))
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			conn.Close()
		})
		checkCut(t, f.backend(t, OpenAIConfig{}))
	})
	t.Run("close-delimited", func(t *testing.T) {
		f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			defer conn.Close()
			fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
			fmt.Fprintf(buf, "data: %s\n\ndata: %s\n\n", chunkJSON("half ", ""), chunkJSON("an answer", ""))
			buf.Flush()
		})
		checkCut(t, f.backend(t, OpenAIConfig{}))
	})
}

func checkCut(t *testing.T, b Backend) {
	t.Helper()
	rec := newRecorder()
	err := b.Stream(context.Background(), question("q"), rec.emit)
	if !errors.Is(err, ErrBackend) || !Retryable(err) {
		t.Fatalf("Stream: %v, want ErrBackend", err)
	}
	if rec.text() != "half an answer" {
		t.Errorf("emitted %q before the cut, want \"half an answer\"", rec.text())
	}
}

func TestOpenAIErrorEventAndContentFilter(t *testing.T) {
	leakCheck(t)
	f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
		sseHeaders(w)
		sendEvent(w, chunkJSON("start ", ""))
		sendEvent(w, `{"error":{"message":"The server is overloaded","type":"server_error"}}`)
	})
	rec := newRecorder()
	err := f.backend(t, OpenAIConfig{}).Stream(context.Background(), question("q"), rec.emit)
	if !errors.Is(err, ErrBackend) || !strings.Contains(err.Error(), "overloaded") {
		t.Errorf("error event: %v, want ErrBackend saying overloaded", err)
	}
	if rec.text() != "start " {
		t.Errorf("emitted %q", rec.text())
	}

	f = newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
		sseHeaders(w)
		sendEvent(w, chunkJSON("start ", ""))
		sendEvent(w, chunkJSON("", "content_filter"))
		sendEvent(w, "[DONE]")
	})
	err = f.backend(t, OpenAIConfig{}).Stream(context.Background(), question("q"), newRecorder().emit)
	if !errors.Is(err, ErrBadRequest) {
		t.Errorf("content_filter: %v, want ErrBadRequest", err)
	}
}

func TestOpenAIEmitErrorStops(t *testing.T) {
	leakCheck(t)
	f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
		sseHeaders(w)
		for i := 0; ; i++ {
			sendEvent(w, chunkJSON("x", ""))
			select {
			case <-r.Context().Done():
				return
			case <-f.release:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	errFull := errors.New("storage full")
	rec := newRecorder()
	rec.fail = errFull
	err := f.backend(t, OpenAIConfig{}).Stream(context.Background(), question("q"), rec.emit)
	if err != errFull {
		t.Fatalf("Stream: %v, want emit's error unchanged", err)
	}
	if n := len(rec.all()); n != 1 {
		t.Errorf("%d emits, want 1", n)
	}
}

func TestOpenAIUnreachable(t *testing.T) {
	leakCheck(t)
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	t.Setenv("AI_TEST_OPENAI_KEY", testKey)
	b, err := newUnchained(Config{Kind: KindOpenAI, OpenAI: OpenAIConfig{BaseURL: url + "/v1", Model: "m", APIKeyEnv: "AI_TEST_OPENAI_KEY"}})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Stream(context.Background(), question("q"), newRecorder().emit)
	if !errors.Is(err, ErrBackend) || !Retryable(err) {
		t.Fatalf("Stream: %v, want ErrBackend", err)
	}
}

// TestOpenAISamplingOptions: ai.openai.max_tokens and temperature are sent
// when set, and not at all when 0 (the model's own limit and default).
func TestOpenAISamplingOptions(t *testing.T) {
	leakCheck(t)
	f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
		sseHeaders(w)
		sendEvent(w, chunkJSON("ok", "stop"))
		sendEvent(w, "[DONE]")
	})
	if err := f.backend(t, OpenAIConfig{MaxTokens: 256, Temperature: 0.3}).Stream(context.Background(), question("q"), newRecorder().emit); err != nil {
		t.Fatal(err)
	}
	c := <-f.requests
	if c.body["max_tokens"] != float64(256) || c.body["temperature"] != 0.3 {
		t.Errorf("max_tokens=%v temperature=%v, want 256 and 0.3", c.body["max_tokens"], c.body["temperature"])
	}
	if err := f.backend(t, OpenAIConfig{}).Stream(context.Background(), question("q"), newRecorder().emit); err != nil {
		t.Fatal(err)
	}
	c = <-f.requests
	for _, k := range []string{"max_tokens", "temperature", "max_completion_tokens"} {
		if v, ok := c.body[k]; ok {
			t.Errorf("%s = %v sent, want it absent when unset", k, v)
		}
	}
}
