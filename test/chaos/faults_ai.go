package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/ai"
)

// aiFaultServer is an http backend (docs/ai.md, "http") that fails as the
// harness tells it: slow (nothing until the request's context ends), 5xx,
// or dying mid-stream (the first half of the answer, then the connection
// closed without the end). Healthy, it streams the demo backend's answer
// to the question at once, so the judge finds it whichever backend of
// the chain answered.
type aiFaultServer struct {
	srv *http.Server
	url string

	mu     sync.Mutex
	mode   string            // ok, slow, 5xx, cut
	counts map[string]int    // mode → requests answered in it
	cut    map[string]string // msgid → question: answers cut mid-stream
}

func newAIFaultServer() (*aiFaultServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &aiFaultServer{url: "http://" + ln.Addr().String() + "/answer", mode: "ok", counts: map[string]int{}, cut: map[string]string{}}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *aiFaultServer) setMode(m string) {
	s.mu.Lock()
	s.mode = m
	s.mu.Unlock()
}

func (s *aiFaultServer) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		MsgID    string `json:"msgid"`
		Question string `json:"question"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"message":"bad request"}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	mode := s.mode
	s.counts[mode]++
	if mode == "cut" {
		s.cut[req.MsgID] = req.Question
	}
	s.mu.Unlock()
	answer := ai.DemoAnswer(req.Question, 3, 0)
	event := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	switch mode {
	case "slow":
		<-r.Context().Done() // past ai.first_token_timeout the chain gives up on it
		return
	case "5xx":
		http.Error(w, `{"message":"chaos: backend unavailable"}`, http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if mode == "cut" {
		event(map[string]string{"text": answer[:len(answer)/2]})
		time.Sleep(300 * time.Millisecond)
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close() // the stream dies without {"done": true}
			}
		}
		return
	}
	event(map[string]string{"text": answer})
	event(map[string]bool{"done": true})
}

func (s *aiFaultServer) Close() { s.srv.Close() }

// aiBackendFaults restarts the nodes with a chain of two backends: an
// http backend (aiFaultServer) first, the demo backend as its fallback,
// a short first-token timeout and a breaker that opens after 3 failures
// for 15 s. Then, phase by phase under traffic, the http backend is slow,
// answers 503, dies mid-stream, and is healthy again until it has
// answered (its breakers closed). Every question must be answered once:
// by the demo fallback while the first backend fails before its first
// token or is skipped; an answer cut mid-stream is the user told (the cut
// text, its note and the failure notice: ExpectFailed), never retried.
// The nodes are restarted with their usual flags after.
func (h *Harness) aiBackendFaults(r *RoundResult, phase time.Duration) error {
	s, err := newAIFaultServer()
	if err != nil {
		return err
	}
	defer s.Close()
	cfgPath := filepath.Join(h.Cfg.Dir, "ai-chain.yaml")
	demo := fmt.Sprintf("{answer_time: %s, answer_time_max: %s}", h.Cfg.AnswerTime, max(h.Cfg.AnswerTime, h.Cfg.AnswerTimeMax))
	yaml := "ai:\n  fallback:\n    - kind: demo\n      demo: " + demo + "\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		return err
	}
	if err := h.restartNodesWith(r, []string{"--config", cfgPath, "--ai=http", "--ai-http-url=" + s.url,
		"--ai-first-token-timeout=5s", "--ai-breaker-failures=3", "--ai-breaker-cooldown=15s"}); err != nil {
		return err
	}
	defer func() {
		if err := h.restartNodesWith(r, nil); err != nil {
			r.note("restarting the nodes with their usual flags: %v", err)
		}
		s.mu.Lock()
		r.ExpectFailed = map[string]bool{}
		for id := range s.cut {
			r.ExpectFailed[id] = true
		}
		r.note("http backend requests by mode: %v; %d answers cut mid-stream (told as failed)", s.counts, len(s.cut))
		s.mu.Unlock()
	}()
	for _, m := range []string{"ok", "slow", "5xx", "cut"} {
		s.setMode(m)
		time.Sleep(phase)
	}
	s.setMode("ok")
	// Healthy again: past the breakers' cool-down the next answers probe
	// it and close them; wait until it has answered a few.
	s.mu.Lock()
	before := s.counts["ok"]
	s.mu.Unlock()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		n := s.counts["ok"] - before
		s.mu.Unlock()
		if n >= 3 {
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("the http backend answered no 3 questions within 2 minutes of being healthy again (breakers stuck open?)")
}
