package ai

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"
)

// Generous: tests must pass on a loaded 2-core machine with -race.
const waitLong = 30 * time.Second

// prompt is how soon a backend must return once its context ends.
const prompt = time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// leakCheck fails t if goroutines started during the test still run once
// its later-registered cleanups are done.
func leakCheck(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// recorder is an emit func that keeps every delta and signals each one.
type recorder struct {
	mu     sync.Mutex
	deltas []string
	ch     chan string // every delta, for tests that wait on one
	fail   error       // returned by emit once set
}

func newRecorder() *recorder { return &recorder{ch: make(chan string, 1<<16)} }

func (r *recorder) emit(d string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deltas = append(r.deltas, d)
	select {
	case r.ch <- d:
	default:
	}
	return r.fail
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.deltas...)
}

func (r *recorder) text() string { return strings.Join(r.all(), "") }

// waitFor waits until the accumulated text contains want.
func (r *recorder) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(waitLong)
	for !strings.Contains(r.text(), want) {
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatalf("no %q in the answer after %s; have %q", want, waitLong, r.text())
		}
	}
}

// checkDeltas fails t on an empty or invalid-UTF-8 delta.
func checkDeltas(t *testing.T, deltas []string) {
	t.Helper()
	for i, d := range deltas {
		if d == "" {
			t.Errorf("delta %d is empty", i)
		}
		if !utf8.ValidString(d) {
			t.Errorf("delta %d is not valid UTF-8: %q", i, d)
		}
	}
}

// streamAsync runs b.Stream in a goroutine the test owns; the returned func
// waits for it (at most waitLong) and returns its error and how long it took
// from when wait was called.
func streamAsync(t *testing.T, ctx context.Context, b Backend, req Request, rec *recorder) func() (time.Duration, error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- b.Stream(ctx, req, rec.emit) }()
	var once sync.Once
	var err error
	var took time.Duration
	wait := func() (time.Duration, error) {
		once.Do(func() {
			start := time.Now()
			select {
			case err = <-done:
				took = time.Since(start)
			case <-time.After(waitLong):
				t.Fatalf("Stream did not return within %s", waitLong)
			}
		})
		return took, err
	}
	t.Cleanup(func() { wait() })
	return wait
}

func question(q string) Request {
	return Request{TaskID: "t1", Messages: []Message{{Role: RoleUser, Content: q}}}
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{ErrBackend, true},
		{ErrTimeout, true},
		{ErrBadRequest, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{errors.New("emit: storage down"), false},
		{errors.Join(ErrBackend, context.Canceled), false},
	} {
		if got := Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestNewConfigErrorsNameTheKey(t *testing.T) {
	t.Setenv("AI_TEST_EMPTY_KEY", "")
	for _, tc := range []struct {
		cfg Config
		key string
	}{
		{Config{}, "ai.kind"},
		{Config{Kind: "gpt"}, "ai.kind"},
		{Config{Kind: KindDemo, Demo: DemoConfig{AnswerTime: -time.Second}}, "ai.demo.answer_time"},
		{Config{Kind: KindDemo, Demo: DemoConfig{AnswerTime: time.Minute, AnswerTimeMax: time.Second}}, "ai.demo.answer_time_max"},
		{Config{Kind: KindDemo, Demo: DemoConfig{Paragraphs: -1}}, "ai.demo.paragraphs"},
		{Config{Kind: KindDemo, Demo: DemoConfig{AnswerBytes: 1 << 30}}, "ai.demo.answer_bytes"},
		{Config{Kind: KindExec}, "ai.exec.command"},
		{Config{Kind: KindExec, Exec: ExecConfig{Command: []string{"/no/such/program"}}}, "ai.exec.command"},
		{Config{Kind: KindExec, Exec: ExecConfig{Command: []string{"sh"}, Input: "xml"}}, "ai.exec.input"},
		{Config{Kind: KindExec, Exec: ExecConfig{Command: []string{"sh"}, Timeout: -1}}, "ai.exec.timeout"},
		{Config{Kind: KindExec, Exec: ExecConfig{Command: []string{"sh"}, Dir: "/no/such/dir"}}, "ai.exec.dir"},
		{Config{Kind: KindExec, Exec: ExecConfig{Command: []string{"sh"}, Env: []string{"OK", "BAD NAME=x"}}}, "ai.exec.env[1]"},
		{Config{Kind: KindOpenAI, OpenAI: OpenAIConfig{APIKeyEnv: "PATH"}}, "ai.openai.model"},
		{Config{Kind: KindOpenAI, OpenAI: OpenAIConfig{Model: "m", APIKeyEnv: "PATH", BaseURL: "localhost:8080"}}, "ai.openai.base_url"},
		{Config{Kind: KindOpenAI, OpenAI: OpenAIConfig{Model: "m", APIKeyEnv: "AI_TEST_EMPTY_KEY"}}, "ai.openai.api_key_env"},
		{Config{Kind: KindOpenAI, OpenAI: OpenAIConfig{Model: "m", APIKeyEnv: "PATH", Timeout: -1}}, "ai.openai.timeout"},
		{Config{Kind: KindOpenAI, OpenAI: OpenAIConfig{Model: "m", APIKeyEnv: "PATH", MaxTokens: -1}}, "ai.openai.max_tokens"},
		{Config{Kind: KindOpenAI, OpenAI: OpenAIConfig{Model: "m", APIKeyEnv: "PATH", Temperature: 2.5}}, "ai.openai.temperature"},
		{Config{Kind: KindOpenAI, OpenAI: OpenAIConfig{Model: "m", APIKeyEnv: "PATH", Temperature: -0.1}}, "ai.openai.temperature"},
		{Config{Kind: KindDify}, "ai.dify.api_key_file"},
		{Config{Kind: KindDify, Dify: DifyConfig{APIKeyFile: "/no/such/file"}}, "ai.dify.api_key_file"},
		{Config{Kind: KindDify, Dify: DifyConfig{APIKeyFile: "/no/such/file", BaseURL: "http://dify.example.com/v1"}}, "ai.dify.base_url"},
		{Config{Kind: KindHTTP}, "ai.http.url"},
		{Config{Kind: KindHTTP, HTTP: HTTPConfig{URL: "http://10.0.0.5:5678/webhook/x"}}, "ai.http.url"},
		{Config{Kind: KindHTTP, HTTP: HTTPConfig{URL: "https://n8n.example.com/webhook/x", TokenFile: "/no/such/file"}}, "ai.http.token_file"},
	} {
		b, err := newUnchained(tc.cfg)
		if err == nil {
			t.Errorf("New(%+v) = %s, want an error naming %s", tc.cfg, b.Name(), tc.key)
			continue
		}
		if !strings.Contains(err.Error(), "config key "+tc.key+":") {
			t.Errorf("New(%+v): %q does not name %s", tc.cfg, err, tc.key)
		}
	}
}

func TestRequestValidation(t *testing.T) {
	leakCheck(t)
	b, err := newUnchained(Config{Kind: KindDemo, Demo: DemoConfig{AnswerTime: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []Request{
		{TaskID: "empty"},
		{TaskID: "no-user", Messages: []Message{{Role: RoleSystem, Content: "be brief"}, {Role: RoleAssistant, Content: "hi"}}},
		{TaskID: "blank", Messages: []Message{{Role: RoleUser, Content: ""}}},
		{TaskID: "role", Messages: []Message{{Role: "tool", Content: "x"}, {Role: RoleUser, Content: "q"}}},
	} {
		err := b.Stream(context.Background(), req, func(string) error { return nil })
		if !errors.Is(err, ErrBadRequest) || Retryable(err) {
			t.Errorf("task %s: %v, want ErrBadRequest", req.TaskID, err)
		}
	}
	q := Request{Messages: []Message{{Role: RoleUser, Content: "first"}, {Role: RoleAssistant, Content: "a"}, {Role: RoleUser, Content: "second"}, {Role: RoleAssistant, Content: "b"}}}
	if got := q.Question(); got != "second" {
		t.Errorf("Question() = %q, want the last user message", got)
	}
}

// newUnchained is New's one backend without the Chain around it: the
// backends' own tests see the backend's errors (a cut is ErrBackend),
// not the chain's (chain_test.go).
func newUnchained(cfg Config, opts ...Option) (Backend, error) {
	b, err := New(cfg, opts...)
	if c, ok := b.(*Chain); ok && len(c.links) == 1 {
		return c.links[0], err
	}
	return b, err
}
