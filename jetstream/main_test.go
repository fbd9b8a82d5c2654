package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/infra"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// leakCheck fails t if goroutines started during the test still run once
// its cleanups (registered later, so run earlier) are done: the embedded
// server is shut down and waited for, clients are closed.
func leakCheck(t *testing.T) {
	t.Helper()
	opts := []goleak.Option{goleak.IgnoreCurrent()}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

// server is one embedded NATS server with JetStream that a test may stop
// and start again on the same data dir and port.
type server struct {
	t    *testing.T
	dir  string
	addr string
	n    *infra.NATS
}

// startServer starts a server in a fresh t.TempDir() on a free port; the
// test's cleanup stops it.
func startServer(t *testing.T) *server {
	t.Helper()
	addr, err := infra.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, dir: t.TempDir(), addr: addr}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *server) start() {
	s.t.Helper()
	if s.n != nil {
		s.t.Fatal("server already running")
	}
	n, err := infra.StartNATS(infra.NATSConfig{DataDir: s.dir, Addr: s.addr, Logger: testLogger(s.t)})
	if err != nil {
		s.t.Fatal(err)
	}
	s.n = n
}

// stop shuts the server down and waits until it has.
func (s *server) stop() {
	if s.n != nil {
		s.n.Close()
		s.n = nil
	}
}

func (s *server) url() string { return "nats://" + s.addr }

// connect is a client of s that reconnects for ever (a short wait between
// tries); the test's cleanup closes it.
func connect(t *testing.T, s *server, opts ...nats.Option) (*nats.Conn, natsjs.JetStream) {
	t.Helper()
	opts = append([]nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
	}, opts...)
	nc, err := nats.Connect(s.url(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// ctxT is a context for one test, with a generous deadline, cancelled at
// its end.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// declare declares the store on js with opts, failing the test on error.
func declare(t *testing.T, js natsjs.JetStream, opts Options) *Store {
	t.Helper()
	opts.Logger = testLogger(t)
	st, err := Declare(ctxT(t), js, opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
