package alert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"
)

func sampleAlert(n int, reason string) Alert {
	a := Alert{ID: "merged-x", Kind: KindMerged, Level: incident.Human, At: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC),
		Summary: "3 bots down", NextAction: "check egress", CommonCause: commonCause}
	for k := range n {
		a.Instances = append(a.Instances, Instance{Bot: fmt.Sprintf("b%d", k), Owner: "alice", Incident: fmt.Sprintf("inc-%d", k),
			Signal: incident.SignalConnection, Reason: reason, DowntimeSeconds: 42})
	}
	return a
}

// robot is a WeCom group robot: it answers each post with the next errcode
// of codes (0 once they run out) and keeps the markdown it got.
type robot struct {
	srv   *httptest.Server
	hits  atomic.Int64
	codes []int
	got   chan string
}

func newRobot(t *testing.T, codes ...int) *robot {
	r := &robot{codes: codes, got: make(chan string, 100)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := int(r.hits.Add(1))
		if req.URL.Query().Get("key") != "SECRETKEY123" || req.Header.Get("Content-Type") != "application/json" {
			t.Errorf("robot: request %s %v", req.URL, req.Header)
		}
		var body struct {
			MsgType  string `json:"msgtype"`
			Markdown struct {
				Content string `json:"content"`
			} `json:"markdown"`
		}
		raw, _ := io.ReadAll(req.Body)
		if err := json.Unmarshal(raw, &body); err != nil || body.MsgType != "markdown" {
			t.Errorf("robot: body %s: %v", raw, err)
		}
		r.got <- body.Markdown.Content
		code := 0
		if n <= len(r.codes) {
			code = r.codes[n-1]
		}
		fmt.Fprintf(w, `{"errcode":%d,"errmsg":"e%d"}`, code, code)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *robot) url() string { return r.srv.URL + "/cgi-bin/webhook/send?key=SECRETKEY123" }

func fastRobot(u string) *WeComRobot { return NewWeComRobot(u, WithRate(rate.Inf, 1)) }

func TestWeComRobotMarkdown(t *testing.T) {
	r := newRobot(t)
	if err := fastRobot(r.url()).Send(context.Background(), sampleAlert(3, "read: connection reset")); err != nil {
		t.Fatal(err)
	}
	c := <-r.got
	for _, want := range []string{"[HUMAN] merged", "3 bots down", "Next: check egress", "Common cause:", "`b2` owner alice, connection: read: connection reset, down 42s (inc-2)", "merged-x"} {
		if !strings.Contains(c, want) {
			t.Errorf("markdown lacks %q:\n%s", want, c)
		}
	}
}

func TestWeComRobotTruncatesAt4096Bytes(t *testing.T) {
	r := newRobot(t)
	a := sampleAlert(200, strings.Repeat("连接被重置", 10)) // multi-byte runes
	if err := fastRobot(r.url()).Send(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	c := <-r.got
	if len(c) > WeComMaxContent || len(c) < WeComMaxContent/2 || !utf8.ValidString(c) || !strings.HasSuffix(c, truncMark) {
		t.Fatalf("content: %d bytes, valid %v, ends %q", len(c), utf8.ValidString(c), c[max(0, len(c)-40):])
	}
	if s := Truncate("short", 10); s != "short" {
		t.Fatalf("Truncate(short) = %q", s)
	}
	for n := 20; n < 60; n++ {
		if s := Truncate(strings.Repeat("机", 30), n); len(s) > n || !utf8.ValidString(s) {
			t.Fatalf("Truncate(%d) = %q (%d bytes)", n, s, len(s))
		}
	}
}

// deliverOne sends a through an outbox for sink with cfg and returns when
// it is sent or given up.
func deliverOne(t *testing.T, sink Sink, cfg Config, log zerolog.Logger, a Alert) *counters {
	t.Helper()
	cfg.NodeID, cfg.Sinks = "n1", []Sink{sink}
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	c := &counters{}
	o := newOutbox(sink, &cfg, log, c)
	o.start(context.Background())
	o.enqueue(a)
	o.stop() // waits for the delivery to end
	return c
}

func fastRetries() Config {
	return Config{MaxAttempts: 3, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Timeout: 5 * time.Second}
}

func TestWeComRobotErrcodeRetriedThenGivenUp(t *testing.T) {
	r := newRobot(t, 93000, 93000, 93000, 93000)
	c := deliverOne(t, fastRobot(r.url()), fastRetries(), zerolog.Nop(), sampleAlert(1, "x"))
	if r.hits.Load() != 3 || c.givenUp.Load() != 1 || c.sent.Load() != 0 || c.retries.Load() != 2 {
		t.Fatalf("hits %d, given up %d, sent %d, retries %d; want 3 attempts then given up", r.hits.Load(), c.givenUp.Load(), c.sent.Load(), c.retries.Load())
	}
}

func TestWeComRobotRateLimitedRetried(t *testing.T) {
	r := newRobot(t, WeComRateLimited, WeComRateLimited)
	s := fastRobot(r.url())
	err := s.Send(context.Background(), sampleAlert(1, "x"))
	if !errors.Is(err, ErrRateLimited) {
		t.Fatalf("first send: %v, want ErrRateLimited", err)
	}
	c := deliverOne(t, s, fastRetries(), zerolog.Nop(), sampleAlert(1, "x"))
	if r.hits.Load() != 3 || c.sent.Load() != 1 || c.givenUp.Load() != 0 {
		t.Fatalf("hits %d, sent %d, given up %d; want the second 45009 retried, then sent", r.hits.Load(), c.sent.Load(), c.givenUp.Load())
	}
}

// WeCom's default pacing: no more than WeComPerMinute a minute.
func TestWeComRobotPaced(t *testing.T) {
	r := newRobot(t)
	s := NewWeComRobot(r.url())
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := s.Send(ctx, sampleAlert(1, "x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, sampleAlert(1, "x")); err == nil {
		t.Fatal("two sends within 500ms went through the robot's pacing")
	}
}

// status answers each request with the next status (200 once they run out).
func statusServer(t *testing.T, statuses ...int) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := int(hits.Add(1))
		var a Alert
		if err := json.NewDecoder(req.Body).Decode(&a); err != nil || a.ID == "" {
			t.Errorf("webhook body: %v %+v", err, a)
		}
		if n <= len(statuses) {
			w.WriteHeader(statuses[n-1])
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestWebhookRetries5xxNot4xx(t *testing.T) {
	srv, hits := statusServer(t, 500, 503)
	c := deliverOne(t, NewWebhook(srv.URL), fastRetries(), zerolog.Nop(), sampleAlert(1, "x"))
	if hits.Load() != 3 || c.sent.Load() != 1 {
		t.Fatalf("500, 503, 200: hits %d, sent %d", hits.Load(), c.sent.Load())
	}

	srv, hits = statusServer(t, 400, 400)
	c = deliverOne(t, NewWebhook(srv.URL), fastRetries(), zerolog.Nop(), sampleAlert(1, "x"))
	if hits.Load() != 1 || c.givenUp.Load() != 1 {
		t.Fatalf("400: hits %d, given up %d; want one attempt", hits.Load(), c.givenUp.Load())
	}
	err := NewWebhook(srv.URL).Send(context.Background(), sampleAlert(1, "x"))
	if !errors.Is(err, ErrPermanent) {
		t.Fatalf("400: %v, want ErrPermanent", err)
	}

	srv, hits = statusServer(t, 429)
	c = deliverOne(t, NewWebhook(srv.URL), fastRetries(), zerolog.Nop(), sampleAlert(1, "x"))
	if hits.Load() != 2 || c.sent.Load() != 1 {
		t.Fatalf("429, 200: hits %d, sent %d", hits.Load(), c.sent.Load())
	}
}

// The robot's key never reaches the log: not from a refusal, not from a
// network error (net/http quotes the URL in its errors).
func TestURLKeyRedactedInLogs(t *testing.T) {
	var buf testenv.LogBuffer
	log := zerolog.New(&buf)
	r := newRobot(t, 40001, 40001, 40001)
	deliverOne(t, fastRobot(r.url()), fastRetries(), log, sampleAlert(1, "x"))

	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL + "/send?key=SECRETKEY123"
	dead.Close()
	c := deliverOne(t, fastRobot(deadURL), fastRetries(), log, sampleAlert(1, "x"))
	err := NewWebhook("http://user:SECRETKEY123@"+strings.TrimPrefix(dead.URL, "http://")+"/?token=SECRETKEY123").Send(context.Background(), sampleAlert(1, "x"))
	out := buf.String()
	if c.givenUp.Load() != 1 || err == nil {
		t.Fatalf("dead robot: given up %d, webhook err %v", c.givenUp.Load(), err)
	}
	if strings.Contains(out, "SECRETKEY123") || strings.Contains(err.Error(), "SECRETKEY123") {
		t.Fatalf("key in log or error:\n%s\n%v", out, err)
	}
	if !strings.Contains(out, "key=REDACTED") || !strings.Contains(out, "given up") {
		t.Fatalf("log lacks the redacted sink name or the outcome:\n%s", out)
	}
	if got := RedactURL("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=abc&debug=1"); got != "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?debug=REDACTED&key=REDACTED" {
		t.Fatalf("RedactURL = %s", got)
	}
}

// A full queue drops, counts and logs; it never blocks the alerter.
func TestFullQueueDropsAndCounts(t *testing.T) {
	cfg, err := Config{NodeID: "n1", Sinks: []Sink{NewWebhook("http://127.0.0.1:1/")}, QueueSize: 1}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var buf testenv.LogBuffer
	c := &counters{}
	o := newOutbox(cfg.Sinks[0], &cfg, zerolog.New(&buf), c)
	o.enqueue(sampleAlert(1, "x"))
	o.enqueue(sampleAlert(1, "y")) // not started: the queue holds one
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // stopped before it could send
	o.start(ctx)
	o.stop()
	if c.dropped.Load() != 2 || !strings.Contains(buf.String(), "sink queue full") {
		t.Fatalf("dropped %d; log:\n%s", c.dropped.Load(), buf.String())
	}
}

// The JSON names are a contract (docs/alerts.md): exactly these.
func TestAlertJSONShape(t *testing.T) {
	raw, err := json.Marshal(sampleAlert(1, "x"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	json.Unmarshal(raw, &m)
	var ins []map[string]json.RawMessage
	json.Unmarshal(m["instances"], &ins)
	keys := func(m map[string]json.RawMessage) string {
		var k []string
		for n := range m {
			k = append(k, n)
		}
		slices.Sort(k)
		return strings.Join(k, ",")
	}
	if got := keys(m); got != "at,common_cause,id,instances,kind,level,next_action,summary" {
		t.Fatalf("alert keys: %s", got)
	}
	if got := keys(ins[0]); got != "bot,downtime_seconds,incident,owner,reason,signal" {
		t.Fatalf("instance keys: %s", got)
	}
	raw, _ = json.Marshal(Alert{ID: "synthetic-x", Kind: KindSynthetic, Instances: []Instance{}})
	if strings.Contains(string(raw), "common_cause") || !strings.Contains(string(raw), `"instances":[]`) {
		t.Fatalf("synthetic: %s", raw)
	}
}
