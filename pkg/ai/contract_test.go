package ai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The contract every backend keeps (the package comment and Backend), run
// over every kind of kinds.go, each against a fake of its own protocol
// that plays the same script: the answer streams in order as valid UTF-8,
// a rune split on the wire comes out whole and bytes that are not UTF-8
// become U+FFFD; a failure before or after the first token is ErrBackend;
// the backend's timeout is ErrTimeout; a cancel ends Stream promptly with
// ctx.Err() and nothing left running; usage and a rich reply reach the
// caller where the protocol carries them (the kind's usage and reply in
// kinds.go), and usage is never made up where it does not. A case a kind
// cannot keep is skipped by name, from its line in kinds.go.

// script is an answer as a fake plays it.
type script struct {
	pieces []string // the answer's text, each piece sent apart (an event, a write)
	split  bool     // each piece's wire bytes go in two writes, cut inside its first multi-byte rune
	end    ending
	usage  *Usage // sent at the end, where the protocol carries it
	reply  *Reply // sent with the answer, where the protocol carries it
}

type ending int

const (
	endDone  ending = iota // the answer is complete
	endFail                // the upstream fails: an error answer before any piece, a cut (or exit) after
	endStall               // nothing more until the client goes
)

// played is a backend facing a fake that plays a script, and the request
// to ask it.
type played struct {
	b   Backend
	req Request
	// echo: the answer holds the script's text rather than being it (the
	// demo answers its question, which is the script).
	echo bool
}

// contractFake is one kind's fake: a backend whose upstream plays s; a
// timeout above 0 is the backend's own (ai.<kind>.timeout).
type contractFake func(t *testing.T, s script, timeout time.Duration) played

// contractFakes has a fake for every kind of kinds.go: a kind without
// one fails the suite.
var contractFakes = map[string]contractFake{
	KindDemo:   playDemo,
	KindExec:   playExec,
	KindOpenAI: playOpenAI,
	KindDify:   playDify,
	KindHTTP:   playHTTP,
}

func TestBackendContract(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			fake, ok := contractFakes[k.name]
			if !ok {
				t.Fatalf("kind %s has no fake in contractFakes: every kind keeps the contract", k.name)
			}
			for _, c := range contractCases {
				t.Run(c.name, func(t *testing.T) {
					leakCheck(t) // first: its check runs after the fake's cleanup
					c.run(t, k, fake)
				})
			}
		})
	}
}

var contractCases = []struct {
	name string
	run  func(t *testing.T, k kind, fake contractFake)
}{
	{"answer", func(t *testing.T, k kind, fake contractFake) {
		answerIs(t, fake(t, script{pieces: []string{"Hello, ", "world", "."}}, 0), "Hello, world.")
	}},
	{"utf8_split_rune", func(t *testing.T, k kind, fake contractFake) {
		answerIs(t, fake(t, script{pieces: []string{"héllo 你", "好 wörld 😀"}, split: true}, 0), "héllo 你好 wörld 😀")
	}},
	{"utf8_invalid_bytes", func(t *testing.T, k kind, fake contractFake) {
		answerIs(t, fake(t, script{pieces: []string{"a\xffb", " c\xe4\xbd"}}, 0), "a\uFFFDb c\uFFFD")
	}},
	{"error_before_first_token", func(t *testing.T, k kind, fake contractFake) {
		needUpstream(t, k)
		p := fake(t, script{end: endFail}, 0)
		rec := newRecorder()
		err := p.b.Stream(context.Background(), p.req, rec.emit)
		if !errors.Is(err, ErrBackend) || !Retryable(err) {
			t.Errorf("Stream: %v, want ErrBackend (retryable)", err)
		}
		if got := rec.text(); got != "" {
			t.Errorf("emitted %q before failing, want nothing", got)
		}
	}},
	{"error_after_first_token", func(t *testing.T, k kind, fake contractFake) {
		needUpstream(t, k)
		p := fake(t, script{pieces: []string{"partial "}, end: endFail}, 0)
		rec := newRecorder()
		err := p.b.Stream(context.Background(), p.req, rec.emit)
		if !errors.Is(err, ErrBackend) || !Retryable(err) {
			t.Errorf("Stream: %v, want ErrBackend (retryable)", err)
		}
		if got := rec.text(); got != "partial " {
			t.Errorf("emitted %q before failing, want %q", got, "partial ")
		}
	}},
	{"timeout", func(t *testing.T, k kind, fake contractFake) {
		needUpstream(t, k)
		p := fake(t, script{pieces: []string{"first "}, end: endStall}, 300*time.Millisecond)
		rec := newRecorder()
		_, err := streamAsync(t, context.Background(), p.b, p.req, rec)()
		if !errors.Is(err, ErrTimeout) || !Retryable(err) {
			t.Errorf("Stream: %v, want ErrTimeout (retryable)", err)
		}
		checkDeltas(t, rec.all())
	}},
	{"cancel", func(t *testing.T, k kind, fake contractFake) {
		p := fake(t, script{pieces: []string{"first "}, end: endStall}, 0)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rec := newRecorder()
		wait := streamAsync(t, ctx, p.b, p.req, rec)
		rec.waitFor(t, "first")
		cancel()
		took, err := wait()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Stream: %v, want context.Canceled", err)
		}
		if took > prompt {
			t.Errorf("Stream returned %s after the cancel, want within %s", took, prompt)
		}
		checkDeltas(t, rec.all())
	}},
	{"usage", func(t *testing.T, k kind, fake contractFake) {
		want := Usage{In: 11, Out: 5}
		p := fake(t, script{pieces: []string{"counted"}, usage: &want}, 0)
		ctx, used := WithUsage(context.Background())
		if err := p.b.Stream(ctx, p.req, newRecorder().emit); err != nil {
			t.Fatal(err)
		}
		u, reported := used()
		switch {
		case k.usage && (!reported || u != want):
			t.Errorf("usage %+v (reported %v), want %+v", u, reported, want)
		case !k.usage && reported:
			t.Errorf("reported usage %+v; kinds.go says %s reports none", u, k.name)
		}
	}},
	{"reply", func(t *testing.T, k kind, fake contractFake) {
		if !k.reply {
			t.Skipf("%s: its protocol carries no rich reply (kinds.go: reply false)", k.name)
		}
		img := DemoPNG("contract")
		p := fake(t, script{pieces: []string{"here is an image"}, reply: &Reply{Images: []ReplyFile{{Name: "a.png", Data: img}}}}, 0)
		sink := &ReplySink{}
		if err := p.b.Stream(WithReplySink(context.Background(), sink), p.req, newRecorder().emit); err != nil {
			t.Fatal(err)
		}
		r := sink.Reply()
		if len(r.Images) != 1 {
			t.Fatalf("reply %+v, want one image", r)
		}
		if _, err := CheckReplyImage(r.Images[0].Name, r.Images[0].Data); err != nil {
			t.Errorf("the reply's image: %v", err)
		}
		// Without a sink the text alone is the answer.
		if err := p.b.Stream(context.Background(), p.req, newRecorder().emit); err != nil {
			t.Errorf("Stream without a reply sink: %v", err)
		}
	}},
}

// needUpstream skips a case a kind without an upstream cannot meet.
func needUpstream(t *testing.T, k kind) {
	t.Helper()
	if !k.upstream {
		t.Skipf("%s: no server or process to fail, stall or time out (kinds.go: upstream false)", k.name)
	}
}

// answerIs streams p's answer and checks it is want (holds want, for an
// echo), in valid, non-empty deltas.
func answerIs(t *testing.T, p played, want string) {
	t.Helper()
	rec := newRecorder()
	if err := p.b.Stream(context.Background(), p.req, rec.emit); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	checkDeltas(t, rec.all())
	// How many U+FFFD a run of bad bytes becomes is the decoder's: one
	// (strings.ToValidUTF8) or one a byte (encoding/json).
	got, want := oneFFFD(rec.text()), oneFFFD(want)
	if p.echo && !strings.Contains(got, want) || !p.echo && got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
}

// oneFFFD is s with each run of U+FFFD as one.
func oneFFFD(s string) string {
	for strings.Contains(s, "\uFFFD\uFFFD") {
		s = strings.ReplaceAll(s, "\uFFFD\uFFFD", "\uFFFD")
	}
	return s
}

// jsonRaw is s as a JSON string with its bytes as they are: a server
// that sends bytes which are not UTF-8 (json.Marshal would mend them).
func jsonRaw(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// writeLine sends line, in two writes cut inside its first multi-byte
// rune when split.
func writeLine(w http.ResponseWriter, line string, split bool) {
	if !split {
		write(w, line)
		return
	}
	a, b := splitRune(line)
	write(w, a)
	write(w, b)
}

// playEvents answers with an event stream: a data line per piece (by
// event), then end (a failure before any piece: status 503 by refuse).
func playEvents(w http.ResponseWriter, r *http.Request, release <-chan struct{}, s script,
	event func(piece string) string, end string, refuse func(w http.ResponseWriter)) {
	if s.end == endFail && len(s.pieces) == 0 {
		refuse(w)
		return
	}
	eventStream(w)
	for _, p := range s.pieces {
		writeLine(w, "data: "+event(p)+"\n\n", s.split)
	}
	switch s.end {
	case endDone:
		write(w, end)
	case endFail:
		cut(w)
	case endStall:
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
}

func playDemo(t *testing.T, s script, _ time.Duration) played {
	cfg := DemoConfig{AnswerTime: 50 * time.Millisecond}
	if s.end == endStall { // a first piece at once, the rest over an hour
		cfg = DemoConfig{AnswerTime: time.Hour, AnswerBytes: 1 << 20}
	}
	b, err := newUnchained(Config{Kind: KindDemo, Demo: cfg})
	if err != nil {
		t.Fatal(err)
	}
	// The demo's upstream is its question, which its answer quotes.
	q := strings.Join(s.pieces, "")
	if s.end == endStall {
		q = "first question"
	}
	return played{b: b, req: question(q), echo: true}
}

func playExec(t *testing.T, s script, timeout time.Duration) played {
	// printf's octal escapes write the bytes exactly, whatever they are.
	octal := func(p string) string {
		var b strings.Builder
		for i := 0; i < len(p); i++ {
			fmt.Fprintf(&b, `\%03o`, p[i])
		}
		return "printf '" + b.String() + "'\n"
	}
	var sh strings.Builder
	for _, p := range s.pieces {
		if s.split {
			a, b := splitRune(p)
			sh.WriteString(octal(a) + "sleep 0.05\n" + octal(b))
		} else {
			sh.WriteString(octal(p))
		}
		sh.WriteString("sleep 0.05\n") // pieces apart, as a model writes them
	}
	switch s.end {
	case endFail:
		sh.WriteString("echo 'model down' >&2; exit 3\n")
	case endStall:
		sh.WriteString("sleep 600\n")
	}
	return played{b: newExecForTest(t, ExecConfig{Command: []string{"sh", "-c", sh.String()}, Timeout: timeout}), req: question("q")}
}

func playOpenAI(t *testing.T, s script, timeout time.Duration) played {
	chunk := func(content string) string {
		return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"test-model","choices":[{"index":0,"delta":{"content":` +
			jsonRaw(content) + `},"finish_reason":null}]}`
	}
	end := "data: " + chunkJSON("", "stop") + "\n\n"
	if s.usage != nil {
		end += fmt.Sprintf(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"test-model","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n",
			s.usage.In, s.usage.Out, s.usage.Total())
	}
	end += "data: [DONE]\n\n"
	f := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
		playEvents(w, r, f.release, s, chunk, end, func(w http.ResponseWriter) { apiError(w, 503, "overloaded") })
	})
	return played{b: f.backend(t, OpenAIConfig{Timeout: timeout}), req: question("q")}
}

func playDify(t *testing.T, s script, timeout time.Duration) played {
	message := func(answer string) string {
		return `{"event":"message","conversation_id":"c1","answer":` + jsonRaw(answer) + `}`
	}
	end := `data: {"event":"message_end","conversation_id":"c1","metadata":{}}` + "\n\n"
	if s.usage != nil {
		end = fmt.Sprintf(`data: {"event":"message_end","conversation_id":"c1","metadata":{"usage":{"prompt_tokens":%d,"completion_tokens":%d}}}`+"\n\n", s.usage.In, s.usage.Out)
	}
	var srv *webServer
	srv = newWebServer(t, func(w http.ResponseWriter, r *http.Request, _ webRequest) {
		playEvents(w, r, srv.release, s, message, end, func(w http.ResponseWriter) { difyRefuse(w, 503, "unavailable", "overloaded") })
	})
	b, err := newUnchained(Config{Kind: KindDify, Dify: DifyConfig{BaseURL: srv.srv.URL + "/v1", APIKeyFile: secretFile(t, testDifyKey), Timeout: timeout}})
	if err != nil {
		t.Fatal(err)
	}
	return played{b: b, req: question("q")}
}

func playHTTP(t *testing.T, s script, timeout time.Duration) played {
	text := func(piece string) string { return `{"text":` + jsonRaw(piece) + `}` }
	last := map[string]any{"done": true}
	if s.usage != nil {
		last["usage"] = map[string]int64{"input_tokens": s.usage.In, "output_tokens": s.usage.Out}
	}
	if s.reply != nil {
		last["reply"] = s.reply
	}
	raw, err := json.Marshal(last)
	if err != nil {
		t.Fatal(err)
	}
	end := "data: " + string(raw) + "\n\n"
	var srv *webServer
	srv = newWebServer(t, func(w http.ResponseWriter, r *http.Request, _ webRequest) {
		playEvents(w, r, srv.release, s, text, end, func(w http.ResponseWriter) { http.Error(w, "overloaded", http.StatusServiceUnavailable) })
	})
	return played{b: httpBackendFor(t, srv, HTTPConfig{Timeout: timeout}), req: question("q")}
}
