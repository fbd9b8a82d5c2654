package ai

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What the dify and http backends' tests share: a local server that keeps
// what it was sent, secret files, and ways to cut a connection.

// webServer is a local HTTP server; handle serves every request. Requests
// are kept for checks; release is closed at cleanup, so that handlers
// that stall return.
type webServer struct {
	srv      *httptest.Server
	requests chan webRequest
	release  chan struct{}
}

type webRequest struct {
	method, path, auth, accept, contentType string
	raw                                     []byte
	body                                    map[string]any
}

func newWebServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, got webRequest)) *webServer {
	t.Helper()
	s := &webServer{requests: make(chan webRequest, 64), release: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		got := webRequest{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization"),
			accept: r.Header.Get("Accept"), contentType: r.Header.Get("Content-Type"), raw: raw}
		_ = json.Unmarshal(raw, &got.body)
		select {
		case s.requests <- got:
		default:
		}
		handle(w, r, got)
	}))
	t.Cleanup(func() {
		close(s.release)
		s.srv.Close()
	})
	return s
}

// next is the next request the server got.
func (s *webServer) next(t *testing.T) webRequest {
	t.Helper()
	select {
	case r := <-s.requests:
		return r
	default:
		t.Fatal("the server got no (further) request")
		return webRequest{}
	}
}

// stall blocks until the client goes or the test ends.
func (s *webServer) stall(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.release:
	}
}

// secretFile writes body to a mode-600 file.
func secretFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(body+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func eventStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

// write sends s now (one TCP write of the chunked body).
func write(w http.ResponseWriter, s string) {
	io.WriteString(w, s)
	w.(http.Flusher).Flush()
}

// cut closes the connection under a chunked body: the client reads an
// unexpected EOF.
func cut(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

// splitRune is s's bytes in two parts, the cut inside its first
// multi-byte rune.
func splitRune(s string) (string, string) {
	for i, r := range s {
		if len(string(r)) > 1 {
			return s[:i+1], s[i+1:]
		}
	}
	panic("no multi-byte rune in " + s)
}

// refusedURL is a loopback URL nothing listens on.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// closeDelimited answers with a body that ends when the connection
// closes (no length, not chunked), holding body.
func closeDelimited(w http.ResponseWriter, contentType, body string) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nConnection: close\r\n\r\n%s", contentType, body)
	buf.Flush()
}

// checkError fails t unless err wraps want (and so is, or is not,
// retryable), says every one of says, and holds none of secrets.
func checkError(t *testing.T, err, want error, says []string, secrets ...string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("Stream: %v, want %v", err, want)
	}
	if Retryable(err) != (want != ErrBadRequest) {
		t.Errorf("Retryable(%v) = %v", err, Retryable(err))
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error %q shows the secret %q", err, s)
		}
	}
}

// docExample is the fenced block after the line "<!-- example: name -->"
// in docs/ai.md: the wire formats the docs show are the ones the tests
// replay.
func docExample(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open("../../docs/ai.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	marker, found, in, indent := "<!-- example: "+name+" -->", false, false, ""
	var lines []string
	for sc.Scan() {
		line := sc.Text()
		fence := strings.HasPrefix(strings.TrimLeft(line, " "), "```")
		switch {
		case !found:
			found = strings.TrimSpace(line) == marker
		case !in && fence: // in a list item, the block is indented: so are its lines
			in, indent = true, line[:len(line)-len(strings.TrimLeft(line, " "))]
		case in && fence:
			return strings.Join(lines, "\n") + "\n"
		case in:
			lines = append(lines, strings.TrimPrefix(line, indent))
		}
	}
	t.Fatalf("docs/ai.md has no fenced block after %q", marker)
	return ""
}

// streamQuiet is Stream with an emit that keeps nothing.
func streamQuiet(b Backend, req Request) error {
	return b.Stream(context.Background(), req, func(string) error { return nil })
}
