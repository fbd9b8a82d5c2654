package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/infra"
	"go.uber.org/goleak"
)

// echoServer echoes every line back; Close waits for all its goroutines.
type echoServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	t.Cleanup(s.Close)
	return s
}

func (s *echoServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends a line and waits up to timeout for its echo.
func roundTrip(c net.Conn, r *bufio.Reader, line string, timeout time.Duration) (string, error) {
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func TestPassThrough(t *testing.T) {
	defer goleak.VerifyNone(t)
	echo := newEchoServer(t)
	p, err := New("127.0.0.1:0", echo.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p.Addr())
	for _, line := range []string{"a", "hello", "third"} {
		got, err := roundTrip(c, r, line, 10*time.Second)
		if err != nil || got != line {
			t.Fatalf("round trip %q = %q, %v", line, got, err)
		}
	}
	c.Close()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p.Close() // twice is fine
	echo.Close()
}

func TestBlackholeAndHeal(t *testing.T) {
	defer goleak.VerifyNone(t)
	echo := newEchoServer(t)
	p, err := New("127.0.0.1:0", echo.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "before", 10*time.Second); err != nil {
		t.Fatal(err)
	}

	p.Blackhole()
	// Proving that nothing arrives needs a bounded wait; 300ms is plenty
	// for a loopback echo that otherwise answers in microseconds.
	got, err := roundTrip(c, r, "during", 300*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("during blackhole: got %q, %v; want a read timeout", got, err)
	}
	// A connection opened during the blackhole is accepted but not served.
	c2, r2 := dial(t, p.Addr())
	if _, err := io.WriteString(c2, "new\n"); err != nil {
		t.Fatal(err)
	}

	p.Heal()
	// The held line is delivered after Heal, as TCP would retransmit it.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "during\n" {
		t.Fatalf("after heal: got %q, %v; want the held line", line, err)
	}
	if got, err := roundTrip(c, r, "after", 10*time.Second); err != nil || got != "after" {
		t.Fatalf("after heal: round trip = %q, %v", got, err)
	}
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := r2.ReadString('\n'); err != nil || line != "new\n" {
		t.Fatalf("connection opened during blackhole: got %q, %v", line, err)
	}
	c.Close()
	c2.Close()
	p.Close()
	echo.Close()
}

func TestCutAll(t *testing.T) {
	defer goleak.VerifyNone(t)
	echo := newEchoServer(t)
	p, err := New("127.0.0.1:0", echo.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "x", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns() = %d, want 1", n)
	}
	p.CutAll()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after CutAll: %v, want EOF or reset", err)
	}
	// New connections still work.
	c2, r2 := dial(t, p.Addr())
	if got, err := roundTrip(c2, r2, "y", 10*time.Second); err != nil || got != "y" {
		t.Fatalf("after CutAll: round trip = %q, %v", got, err)
	}
	c2.Close()
	p.Close()
	echo.Close()
}

func TestCloseWhileBlackholed(t *testing.T) {
	defer goleak.VerifyNone(t)
	echo := newEchoServer(t)
	p, err := New("127.0.0.1:0", echo.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, _ := dial(t, p.Addr())
	io.WriteString(c, "x\n")
	p.Blackhole()
	c2, _ := dial(t, p.Addr())
	io.WriteString(c2, "y\n")
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return while blackholed")
	}
	c.Close()
	c2.Close()
	echo.Close()
}

func TestTargetDown(t *testing.T) {
	defer goleak.VerifyNone(t)
	// Free a moment ago and below the ephemeral range (infra.FreeAddr), so
	// no listen on port 0 and no connection's source port is given it now.
	target, err := infra.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, err := New("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, r := dial(t, p.Addr())
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with target down: %v, want EOF or reset", err)
	}
}

// A client filter sees the client's bytes before the target does; the
// target's bytes come back untouched.
func TestClientFilter(t *testing.T) {
	defer goleak.VerifyNone(t)
	echo := newEchoServer(t)
	dropX := func() func([]byte) []byte {
		var out []byte
		return func(p []byte) []byte {
			out = out[:0]
			for _, b := range p {
				if b != 'x' {
					out = append(out, b)
				}
			}
			return out
		}
	}
	p, err := New("127.0.0.1:0", echo.ln.Addr().String(), WithClientFilter(dropX))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, r := dial(t, p.Addr())
	if _, err := io.WriteString(c, "xxx"); err != nil { // filtered to nothing: no write
		t.Fatal(err)
	}
	if got, err := roundTrip(c, r, "axbx", 10*time.Second); err != nil || got != "ab" {
		t.Fatalf("round trip through the filter = %q, %v; want %q", got, err, "ab")
	}
	c.Close()
	p.Close()
	echo.Close()
}
