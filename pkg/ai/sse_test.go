package ai

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// sseData is every event's data that sseEvents yields from stream, and
// the error that ended it.
func sseData(stream string) ([]string, error) {
	var got []string
	for ev, err := range sseEvents(strings.NewReader(stream)) {
		if err != nil {
			return got, err
		}
		got = append(got, ev.Data)
	}
	return got, nil
}

// TestSSEReadsTheSpecificationsExamples runs the examples of the HTML
// specification's "Server-sent events" section (9.2.6, the event stream
// interpretation) and its line-ending and BOM rules.
func TestSSEReadsTheSpecificationsExamples(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		want         []string
	}{
		// "the data buffer would contain the string YHOO\n+2\n10"
		{"data lines joined", "data: YHOO\ndata: +2\ndata: 10\n\n", []string{"YHOO\n+2\n10"}},
		// A comment, then three events; one leading space is removed, no more.
		{"comments, id and spaces", ": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n",
			[]string{"first event", "second event"}},
		{"the third event dispatched", ": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n",
			[]string{"first event", "second event", " third event"}},
		// "The first block fires events with the data set to the empty
		// string" (not yielded here: no data is no delta), "the second block
		// an event with the data set to a string containing just a newline",
		// the last block is discarded at the end of the stream.
		{"empty data and a pending event", "data\n\ndata\ndata\n\ndata:", []string{"\n"}},
		// "The following stream fires two identical events".
		{"with or without the space", "data:test\n\ndata: test\n\n", []string{"test", "test"}},
		{"CR line endings", "data: a\rdata: b\r\rdata: c\r\r", []string{"a\nb", "c"}},
		{"CRLF line endings", "data: a\r\ndata: b\r\n\r\n", []string{"a\nb"}},
		{"a leading BOM", "\uFEFFdata: a\n\n", []string{"a"}},
		{"retry and an event name are not data", "retry: 1000\n\nevent: ping\n\nevent: message\ndata: x\n\n", []string{"x"}},
		{"a field without a colon", "data\ndata: x\n\n", []string{"\nx"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sseData(tc.stream)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("data %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSSEReadErrors: a cut connection and an event past sseMaxEvent end
// the sequence with the error classify knows.
func TestSSEReadErrors(t *testing.T) {
	cut := io.MultiReader(strings.NewReader("data: a\n\ndata: b"), errReader{io.ErrUnexpectedEOF})
	var got []string
	var end error
	for ev, err := range sseEvents(cut) {
		if err != nil {
			end = err
			break
		}
		got = append(got, ev.Data)
	}
	if !reflect.DeepEqual(got, []string{"a"}) || !errors.Is(end, io.ErrUnexpectedEOF) {
		t.Fatalf("cut: data %q, error %v", got, end)
	}
	if _, err := sseData("data: " + strings.Repeat("x", sseMaxEvent) + "\n\n"); !errors.Is(err, bufio.ErrTooLong) {
		t.Fatalf("an event past the bound: %v, want bufio.ErrTooLong", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// TestHTTPEventSplitOverDataLines: a JSON event whose object spans two
// data lines, with CR line endings, a comment and a retry field between
// events, is one delta of the answer.
func TestHTTPEventSplitOverDataLines(t *testing.T) {
	leakCheck(t)
	s := newWebServer(t, func(w http.ResponseWriter, r *http.Request, got webRequest) {
		w.Header().Set("Content-Type", "text/event-stream")
		write(w, ": keep-alive\r")
		write(w, "retry: 3000\r\r")
		write(w, "data: {\"text\":\r")
		write(w, "data:  \"你好，\"}\r\r")
		write(w, "data: {\"text\": \"world\"}\r\r")
		write(w, "data: {\"done\": true}\r\r")
	})
	b := httpBackendFor(t, s, HTTPConfig{})
	rec := newRecorder()
	if err := b.Stream(context.Background(), docRequest(), rec.emit); err != nil {
		t.Fatal(err)
	}
	if rec.text() != "你好，world" {
		t.Fatalf("answer %q", rec.text())
	}
}
