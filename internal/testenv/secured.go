package testenv

import (
	"context"
	"testing"

	"github.com/botctl/botctl/pkg/infra"
	"github.com/rs/zerolog"
)

// Secured is an etcd that asks for client certificates and a NATS server
// with TLS and a password, with certificates of one CA: what the example
// cluster runs. Both are closed when the test ends.
type Secured struct {
	CA           *CA
	Etcd         *infra.Etcd
	NATS         *infra.NATS
	NATSUser     string
	NATSPassword string
}

// StartSecured starts them.
func StartSecured(t testing.TB) *Secured {
	t.Helper()
	ca := NewCA(t)
	etcdCert, etcdKey := ca.Issue(t, "etcd")
	natsCert, natsKey := ca.Issue(t, "nats")
	e, _, err := infra.StartEtcdOnFreePorts(context.Background(), infra.EtcdConfig{DataDir: t.TempDir(), UnsafeNoFsync: true,
		CertFile: etcdCert, KeyFile: etcdKey, ClientCAFile: ca.CAFile, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	s := &Secured{CA: ca, Etcd: e, NATSUser: "botctl", NATSPassword: "nats-password-0123"}
	s.NATS, err = infra.StartNATS(infra.NATSConfig{DataDir: t.TempDir(), Addr: "127.0.0.1:0", CertFile: natsCert, KeyFile: natsKey, CAFile: ca.CAFile,
		Users: map[string]string{s.NATSUser: s.NATSPassword}, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.NATS.Close)
	return s
}
