// Package testenv starts real infrastructure for tests: an embedded NATS
// server with JetStream and botctl's streams and buckets declared. Never
// mocks: the components are the ones production uses.
package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// JetStream is an embedded NATS server with botctl's store declared.
type JetStream struct {
	Server  *infra.NATS
	Conn    *nats.Conn
	JS      natsjs.JetStream
	Store   *jetstream.Store
	DataDir string
}

// StartJetStream starts a server in a temp dir and declares the store with
// opts (zero: defaults). Everything is closed when the test ends.
func StartJetStream(t testing.TB, opts jetstream.Options) *JetStream {
	t.Helper()
	dir := t.TempDir()
	srv, err := infra.StartNATS(infra.NATSConfig{DataDir: dir, Addr: "127.0.0.1:0", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	nc, js := Connect(t, srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := jetstream.Declare(ctx, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &JetStream{Server: srv, Conn: nc, JS: js, Store: store, DataDir: dir}
}

// Connect connects to the NATS server at url with opts, closed when the
// test ends, and returns the connection and its JetStream context.
func Connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, natsjs.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
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

// StartEtcd starts a single-member embedded etcd on a free loopback port
// (no fsync: a test's data need not survive a power cut), stopped when the
// test ends.
func StartEtcd(t testing.TB) *infra.Etcd {
	t.Helper()
	e, _, err := infra.StartEtcdOnFreePorts(context.Background(), infra.EtcdConfig{DataDir: t.TempDir(), UnsafeNoFsync: true, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}
