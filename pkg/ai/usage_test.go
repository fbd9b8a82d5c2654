package ai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
)

// Each backend that knows what an answer cost reports it to the meter on
// its context: openai (asked for with stream_options.include_usage, sent
// in a last chunk without choices), dify (message_end's metadata.usage)
// and http (a usage object on an event).
func TestBackendsReportUsage(t *testing.T) {
	leakCheck(t)
	oa := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, f *fakeOpenAI) {
		sseHeaders(w)
		sendEvent(w, chunkJSON("hi", ""))
		sendEvent(w, chunkJSON("", "stop"))
		sendEvent(w, `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"test-model","choices":[],"usage":{"prompt_tokens":42,"completion_tokens":7,"total_tokens":49}}`)
		sendEvent(w, "[DONE]")
	})
	hs := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
		w.Header().Set("Content-Type", "text/event-stream")
		write(w, "data: {\"text\": \"hi\"}\n\n")
		write(w, "data: {\"done\": true, \"usage\": {\"input_tokens\": 12, \"output_tokens\": 3}}\n\n")
	})
	for _, tc := range []struct {
		name string
		b    Backend
		req  Request
		want Usage
	}{
		{"openai", oa.backend(t, OpenAIConfig{}), question("q"), Usage{In: 42, Out: 7}},
		{"dify", newFakeDify(t).backend(t, nil, DifyConfig{}), difyQuestion("alice", "alice", "q"), Usage{In: 1033, Out: 135}},
		{"http", httpBackendFor(t, hs, HTTPConfig{}), question("q"), Usage{In: 12, Out: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, used := WithUsage(context.Background())
			if err := tc.b.Stream(ctx, tc.req, newRecorder().emit); err != nil {
				t.Fatal(err)
			}
			if u, ok := used(); !ok || u != tc.want {
				t.Errorf("usage %+v (reported %v), want %+v", u, ok, tc.want)
			}
		})
	}
	c := <-oa.requests
	if so, _ := c.body["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("openai request's stream_options %v: want include_usage true", c.body["stream_options"])
	}
	// ai.openai.no_usage: not asked, for a server that refuses the option.
	if err := oa.backend(t, OpenAIConfig{NoUsage: true}).Stream(context.Background(), question("q"), newRecorder().emit); err != nil {
		t.Fatal(err)
	}
	if c := <-oa.requests; c.body["stream_options"] != nil {
		t.Errorf("with no_usage, the request's stream_options %v: want none", c.body["stream_options"])
	}
	// Without a meter, reporting does nothing; a backend that reports
	// nothing is not zero tokens.
	ReportUsage(context.Background(), Usage{In: 1})
	ctx, used := WithUsage(context.Background())
	if err := newDemo(DemoConfig{}).Stream(ctx, question("q"), newRecorder().emit); err != nil {
		t.Fatal(err)
	}
	if _, ok := used(); ok {
		t.Error("demo reported usage")
	}
}

func TestErrorClass(t *testing.T) {
	for err, want := range map[error]string{
		nil: "", context.Canceled: "",
		fmt.Errorf("%w: x", ErrBackend):    ErrorClassBackend,
		fmt.Errorf("%w: x", ErrBadRequest): ErrorClassBadRequest,
		fmt.Errorf("%w: x", ErrTimeout):    ErrorClassTimeout,
		errors.New("emit failed"):          ErrorClassOther,
	} {
		if got := ErrorClass(err); got != want {
			t.Errorf("ErrorClass(%v) = %q, want %q", err, got, want)
		}
	}
}
