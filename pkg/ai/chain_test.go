package ai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/fakeclock"
	"github.com/botctl/botctl/pkg/config"
)

// Chain tests run real HTTP servers speaking the backends' APIs: an
// OpenAI-compatible primary (refusing connections, failing, cut, silent)
// and an http webhook as the fallback.

// webhook is a fallback that answers every question with its text.
func webhook(t *testing.T, answer string) (*webServer, HTTPConfig) {
	s := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Content-Length", fmt.Sprint(len(answer)))
		write(w, answer)
	})
	return s, HTTPConfig{URL: s.srv.URL + webhookPath, TokenFile: secretFile(t, testToken)}
}

// closedPort is a base URL whose port refuses connections (a server closed).
func closedPort(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	return url
}

func openAIAt(t *testing.T, baseURL string) OpenAIConfig {
	t.Setenv("AI_TEST_OPENAI_KEY", testKey)
	return OpenAIConfig{BaseURL: baseURL + "/v1", Model: "primary", APIKeyEnv: "AI_TEST_OPENAI_KEY"}
}

func chain(t *testing.T, cfg Config, opts ...Option) *Chain {
	t.Helper()
	b, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b.(*Chain)
}

// steps is the route in short; the webhook's name (its host and port)
// reads "http:hook".
func steps(route *Route) string {
	var out []string
	for _, s := range route.Steps() {
		name := s.Backend
		if strings.HasPrefix(name, "http:127.0.0.1:") {
			name = "http:hook"
		}
		out = append(out, name+" "+s.Outcome)
	}
	return strings.Join(out, ", ")
}

func botQuestion(q string) Request {
	r := question(q)
	r.Bot = "b1"
	return r
}

// A primary that refuses connections (its port closed) is replaced by the
// fallback for the same answer; the route says so, and the fallback is
// counted.
func TestChainFallsBackFromARefusedConnection(t *testing.T) {
	leakCheck(t)
	hook, hcfg := webhook(t, "the fallback's answer")
	br := NewBreakers(nil, nil)
	c := chain(t, Config{Kind: KindOpenAI, OpenAI: openAIAt(t, closedPort(t)),
		Fallback: []BackendConfig{{Kind: KindHTTP, HTTP: hcfg}}}, WithBreakers(br))
	ctx, route := WithRoute(context.Background())
	rec := newRecorder()
	if err := c.Stream(ctx, botQuestion("q"), rec.emit); err != nil {
		t.Fatal(err)
	}
	if rec.text() != "the fallback's answer" {
		t.Errorf("answer %q", rec.text())
	}
	if got, want := steps(route), "openai:primary failed, http:hook answered"; got != want {
		t.Errorf("route %q, want %q", got, want)
	}
	if s := route.Steps()[0]; !strings.Contains(s.Reason, "refused") {
		t.Errorf("the primary's step %+v does not say the connection was refused", s)
	}
	hook.next(t)
	_, falls, _ := br.Snapshot()
	if len(falls) != 1 || falls[0] != (FallbackCount{Bot: "b1", From: "openai:primary", To: "http:" + strings.TrimPrefix(hook.srv.URL, "http://"), N: 1}) {
		t.Errorf("fallbacks %+v", falls)
	}
}

// A primary killed mid-stream (the server closes the connection after
// some tokens) ends the answer: the text so far, the note naming it, and
// ErrCut (not retryable). The fallback is not asked.
func TestChainCutMidStreamEndsWithTheNote(t *testing.T) {
	leakCheck(t)
	var fallbackAsked atomic.Bool
	hook := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) { fallbackAsked.Store(true) })
	f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
		sseHeaders(w)
		sendEvent(w, chunkJSON("half ", ""))
		sendEvent(w, chunkJSON("an answer", ""))
		cut(w)
	})
	c := chain(t, Config{Kind: KindOpenAI, OpenAI: openAIAt(t, f.srv.URL),
		Fallback: []BackendConfig{{Kind: KindHTTP, HTTP: HTTPConfig{URL: hook.srv.URL + "/x"}}}})
	ctx, route := WithRoute(context.Background())
	rec := newRecorder()
	err := c.Stream(ctx, botQuestion("q"), rec.emit)
	if !errors.Is(err, ErrCut) || Retryable(err) || errors.Is(err, ErrBackend) {
		t.Fatalf("Stream: %v, want ErrCut alone", err)
	}
	want := "half an answer\n\n" + fmt.Sprintf(CutNote, "openai:primary")
	if rec.text() != want {
		t.Errorf("answer %q, want %q", rec.text(), want)
	}
	if got := steps(route); got != "openai:primary cut" {
		t.Errorf("route %q", got)
	}
	if fallbackAsked.Load() {
		t.Error("the fallback was asked after the answer began")
	}
}

// A primary that sends its headers and then nothing is given up at
// ai.first_token_timeout, and the fallback answers. The timeout is the
// chain's clock's, stepped by the test.
func TestChainFirstTokenTimeoutFallsBack(t *testing.T) {
	leakCheck(t)
	f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
		sseHeaders(w)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-f.release:
		}
	})
	_, hcfg := webhook(t, "in time")
	clk := fakeclock.New(time.Now())
	c := chain(t, Config{Kind: KindOpenAI, OpenAI: openAIAt(t, f.srv.URL), FirstTokenTimeout: time.Second,
		Fallback: []BackendConfig{{Kind: KindHTTP, HTTP: hcfg}}}, WithClock(clk))
	ctx, route := WithRoute(context.Background())
	rec := newRecorder()
	done := make(chan error, 1)
	go func() { done <- c.Stream(ctx, botQuestion("q"), rec.emit) }()
	clk.AwaitWaiters(t, 1) // the primary's first-token timeout
	clk.Step(time.Second)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("no answer a minute after the first-token timeout passed")
	}
	if rec.text() != "in time" || steps(route) != "openai:primary failed, http:hook answered" {
		t.Errorf("answer %q, route %q", rec.text(), steps(route))
	}
	if s := route.Steps()[0]; !strings.Contains(s.Reason, "no first token within 1s") {
		t.Errorf("primary's step %+v", s)
	}
}

// A refusal (4xx) is the answer: the fallback is not asked.
func TestChainRefusalDoesNotFallBack(t *testing.T) {
	leakCheck(t)
	var fallbackAsked atomic.Bool
	hook := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) { fallbackAsked.Store(true) })
	f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) { apiError(w, 400, "no images here") })
	c := chain(t, Config{Kind: KindOpenAI, OpenAI: openAIAt(t, f.srv.URL),
		Fallback: []BackendConfig{{Kind: KindHTTP, HTTP: HTTPConfig{URL: hook.srv.URL + "/x"}}}})
	ctx, route := WithRoute(context.Background())
	err := c.Stream(ctx, botQuestion("q"), newRecorder().emit)
	if !errors.Is(err, ErrBadRequest) || fallbackAsked.Load() || steps(route) != "openai:primary refused" {
		t.Fatalf("Stream: %v, fallback asked %v, route %q", err, fallbackAsked.Load(), steps(route))
	}
}

// watcher records what the breakers tell.
type watcher struct {
	mu     sync.Mutex
	events []string
}

func (w *watcher) BreakerChanged(bot, backend string, state BreakerState, why string) {
	w.add(fmt.Sprintf("%s %s %s", bot, backend, state))
}
func (w *watcher) AllDown(bot string, down map[string]string) {
	w.add(fmt.Sprintf("%s all down (%d)", bot, len(down)))
}
func (w *watcher) Recovered(bot, backend string) { w.add(bot + " recovered by " + backend) }
func (w *watcher) add(s string) {
	w.mu.Lock()
	w.events = append(w.events, s)
	w.mu.Unlock()
}
func (w *watcher) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.events, "; ")
}

// fakeClock is the breakers' time.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// flaky is an OpenAI-compatible server that answers 503 while down.
func flaky(t *testing.T, answer string) (*fakeOpenAI, *atomic.Bool, *atomic.Int32) {
	var down atomic.Bool
	var calls atomic.Int32
	down.Store(true)
	f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
		calls.Add(1)
		if down.Load() {
			apiError(w, 503, "overloaded")
			return
		}
		sseHeaders(w)
		sendEvent(w, chunkJSON(answer, ""))
		sendEvent(w, chunkJSON("", "stop"))
	})
	return f, &down, &calls
}

// The breaker opens after ai.breaker.failures failures in a row and the
// backend is skipped (not asked); after the cool-down one answer probes
// it: a failure opens it again, a success closes it.
func TestChainBreakerOpensSkipsHalfOpensAndCloses(t *testing.T) {
	leakCheck(t)
	f, down, calls := flaky(t, "primary's")
	_, hcfg := webhook(t, "fallback's")
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	w := &watcher{}
	br := NewBreakers(w, clock.now)
	c := chain(t, Config{Kind: KindOpenAI, OpenAI: openAIAt(t, f.srv.URL), Breaker: BreakerConfig{Failures: 2, Cooldown: 30 * time.Second},
		Fallback: []BackendConfig{{Kind: KindHTTP, HTTP: hcfg}}}, WithBreakers(br))
	ask := func() (string, string) {
		t.Helper()
		ctx, route := WithRoute(context.Background())
		rec := newRecorder()
		if err := c.Stream(ctx, botQuestion("q"), rec.emit); err != nil {
			t.Fatal(err)
		}
		return rec.text(), steps(route)
	}
	for i := range 2 {
		if text, route := ask(); text != "fallback's" || route != "openai:primary failed, http:hook answered" {
			t.Fatalf("answer %d: %q by %q", i, text, route)
		}
	}
	if s := br.State("b1", "openai:primary"); s != Open {
		t.Fatalf("after 2 failures the breaker is %s", s)
	}
	if _, route := ask(); route != "openai:primary skipped, http:hook answered" || calls.Load() != 2 {
		t.Fatalf("open: route %q, primary asked %d times (want 2: skipped)", route, calls.Load())
	}
	clock.add(31 * time.Second) // the probe fails: open again
	if _, route := ask(); route != "openai:primary failed, http:hook answered" || br.State("b1", "openai:primary") != Open {
		t.Fatalf("failed probe: route %q, breaker %s", route, br.State("b1", "openai:primary"))
	}
	if _, route := ask(); route != "openai:primary skipped, http:hook answered" {
		t.Fatalf("reopened: route %q", route)
	}
	clock.add(31 * time.Second)
	down.Store(false) // the probe succeeds: closed
	if text, route := ask(); text != "primary's" || route != "openai:primary answered" || br.State("b1", "openai:primary") != Closed {
		t.Fatalf("probe: %q by %q, breaker %s", text, route, br.State("b1", "openai:primary"))
	}
	want := "b1 openai:primary open; b1 openai:primary half-open; b1 openai:primary open; b1 openai:primary half-open; b1 openai:primary closed"
	if got := w.all(); got != want {
		t.Errorf("watcher heard %q, want %q", got, want)
	}
	views, _, _ := br.Snapshot()
	if len(views) != 2 || views[0].State != Closed || views[1].Backend != "openai:primary" || views[1].State != Closed {
		t.Errorf("snapshot %+v", views)
	}
}

// When every backend of a bot is open the watcher hears AllDown once,
// answers fail at once (ErrBackend, no backend asked), and the first
// backend back is Recovered.
func TestChainAllDown(t *testing.T) {
	leakCheck(t)
	p, pdown, pcalls := flaky(t, "primary's")
	s, _, scalls := flaky(t, "second's")
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	w := &watcher{}
	br := NewBreakers(w, clock.now)
	second := openAIAt(t, s.srv.URL)
	second.Model = "second"
	c := chain(t, Config{Kind: KindOpenAI, OpenAI: openAIAt(t, p.srv.URL), Breaker: BreakerConfig{Failures: 1, Cooldown: time.Minute},
		Fallback: []BackendConfig{{Kind: KindOpenAI, OpenAI: second}}}, WithBreakers(br))
	err := c.Stream(context.Background(), botQuestion("q"), newRecorder().emit)
	if !errors.Is(err, ErrBackend) || !strings.Contains(err.Error(), "overloaded") {
		t.Fatalf("both failing: %v", err)
	}
	if got := w.all(); !strings.HasSuffix(got, "b1 all down (2)") || strings.Count(got, "all down") != 1 {
		t.Fatalf("watcher heard %q", got)
	}
	ctx, route := WithRoute(context.Background())
	err = c.Stream(ctx, botQuestion("q"), newRecorder().emit)
	if !errors.Is(err, ErrBackend) || !strings.Contains(err.Error(), "circuit breaker open") || pcalls.Load() != 1 || scalls.Load() != 1 {
		t.Fatalf("all open: %v (asked %d, %d)", err, pcalls.Load(), scalls.Load())
	}
	if got := steps(route); got != "openai:primary skipped, openai:second skipped" {
		t.Errorf("route %q", got)
	}
	clock.add(2 * time.Minute)
	pdown.Store(false)
	if err := c.Stream(context.Background(), botQuestion("q"), newRecorder().emit); err != nil {
		t.Fatal(err)
	}
	if got := w.all(); !strings.HasSuffix(got, "b1 recovered by openai:primary") {
		t.Errorf("watcher heard %q", got)
	}
}

// docs/ai.md's fallback example is a valid ai section of three backends.
func TestFallbackDocExample(t *testing.T) {
	p := filepath.Join(t.TempDir(), "botctl.yaml")
	if err := os.WriteFile(p, []byte(docExample(t, "fallback")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.AI.Validate(); err != nil {
		t.Fatal(err)
	}
	if bs := cfg.AI.Backends(); len(bs) != 3 || bs[1].OpenAI.Model != "deepseek-chat" || bs[2].Kind != KindHTTP || cfg.AI.FirstTokenTimeout != 30*time.Second {
		t.Errorf("the example's backends %+v", bs)
	}
}

// A backend that sent a reply (a card) and then failed before its first
// token leaves nothing of it in the answer: the fallback's answer is the
// answer, and its reply (none) the reply.
func TestChainFailedBackendsReplyIsDropped(t *testing.T) {
	leakCheck(t)
	primary := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
		w.Header().Set("Content-Type", "text/event-stream")
		write(w, `data: {"reply": {"card": {"card_type": "text_notice"}}}`+"\n\n")
		panic(http.ErrAbortHandler) // the connection cut: no text, no done
	})
	_, fb := webhook(t, "from the fallback")
	c := chain(t, Config{Kind: KindHTTP, HTTP: HTTPConfig{URL: primary.srv.URL + webhookPath, TokenFile: secretFile(t, testToken)},
		Fallback: []BackendConfig{{Kind: KindHTTP, HTTP: fb}}})
	sink := &ReplySink{}
	ctx, route := WithRoute(WithReplySink(context.Background(), sink))
	var text strings.Builder
	if err := c.Stream(ctx, botQuestion("hi"), func(d string) error { text.WriteString(d); return nil }); err != nil {
		t.Fatal(err)
	}
	if text.String() != "from the fallback" || steps(route) != "http:hook failed, http:hook answered" {
		t.Fatalf("answer %q, route %s", text.String(), steps(route))
	}
	if r := sink.Reply(); !r.Empty() {
		t.Fatalf("the failed backend's reply is in the answer: %+v", r)
	}
}
