package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/pkg/wecomsim"
	proc "github.com/botctl/botctl/test/e2e/cluster"
)

// simClient talks to a `botctl sim` process's control API: it plays the
// users and drains the recorder.
type simClient struct {
	base string // http://ADDR
	hc   *http.Client
}

func newSimClient(base string) *simClient {
	tr := &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute}
	return &simClient{base: base, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

func (s *simClient) post(user, text string) error {
	body, _ := json.Marshal(map[string]string{"bot_id": rampBot, "user_id": user, "text": text})
	resp, err := s.hc.Post(s.base+"/control/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /control/messages: %s: %s", resp.Status, data)
	}
	return nil
}

// drain returns the events recorded since the last drain.
func (s *simClient) drain() ([]wecomsim.RecordedEvent, error) {
	resp, err := s.hc.Get(s.base + "/control/recording?drain=1&bot_id=" + rampBot)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET /control/recording: %s: %s", resp.Status, b)
	}
	var r struct {
		Events []wecomsim.RecordedEvent `json:"events"`
	}
	err = json.NewDecoder(resp.Body).Decode(&r)
	return r.Events, err
}

func (s *simClient) stats() (proc.SimStats, error) {
	var st proc.SimStats
	err := proc.GetJSON(s.base+"/control/stats?bot_id="+rampBot, &st)
	return st, err
}

// generated is what the generator did.
type generated struct {
	sent, errors int
	took         time.Duration
	late         dist // post started − when it was due
	firstErr     string
}

// generate posts n messages, one per conversation prefix-0 … prefix-(n-1),
// at rate per second, open loop: a scheduler hands each message to a pool
// of posters when it is due, so a slow answer delays neither the schedule
// nor the other posts (lateness is recorded, not hidden).
func generate(s *simClient, prefix string, n int, rate float64) generated {
	type job struct {
		i   int
		due time.Time
	}
	jobs := make(chan job, n)
	var g generated
	var mu sync.Mutex
	var errs atomic.Int64
	var wg sync.WaitGroup
	posters := min(64, max(4, int(rate/10)))
	start := time.Now()
	for range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				late := time.Since(j.due)
				err := s.post(fmt.Sprintf("%s-%d", prefix, j.i), question(prefix, j.i))
				mu.Lock()
				g.late = append(g.late, late)
				if err != nil && g.firstErr == "" {
					g.firstErr = err.Error()
				}
				mu.Unlock()
				if err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	period := time.Duration(float64(time.Second) / rate)
	for i := range n {
		due := start.Add(time.Duration(i) * period)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		jobs <- job{i, due}
	}
	close(jobs)
	wg.Wait()
	g.sent, g.errors, g.took = n, int(errs.Load()), time.Since(start)
	g.late = g.late.sorted()
	return g
}

// question is conversation i's question; the demo backend's answer to it
// is ai.DemoAnswer(question, 3, 0).
func question(prefix string, i int) string { return fmt.Sprintf("question %d from %s", i, prefix) }
