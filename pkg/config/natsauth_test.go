package config

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/infra"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"
)

// connectNATS connects the way botctl does: the config's Options, then
// nats.Connect.
func connectNATS(t *testing.T, n NATS) (*nats.Conn, error) {
	t.Helper()
	opts, err := n.Options()
	if err != nil {
		t.Fatal(err)
	}
	return nats.Connect(n.URL, append(opts, nats.Timeout(10*time.Second))...)
}

// A real NATS server in operator mode (accounts and users as JWTs, an
// account resolver): a node with nats.creds_file of a user of a known
// account gets in and declares its store in that account's JetStream; a
// well-formed creds file of an account the server does not know is
// refused, with an error that names nats.creds_file and holds no seed; a
// missing creds file is refused at start, naming the key.
func TestNATSCredsFileOperatorMode(t *testing.T) {
	srv := testenv.StartOperatorNATS(t, "BOTCTL")
	dir := t.TempDir()

	cfg := Defaults()
	cfg.NATS.URL, cfg.NATS.CredsFile = srv.ClientURL(), srv.Creds(t, dir, "BOTCTL")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	nc, err := connectNATS(t, cfg.NATS)
	if err != nil {
		t.Fatalf("connect with the account's creds: %v", err)
	}
	js, _ := natsjs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err = jetstream.Declare(ctx, js, jetstream.Options{Prefix: cfg.NATS.Prefix})
	cancel()
	nc.Close()
	if err != nil {
		t.Fatalf("declare in the account's JetStream: %v", err)
	}

	foreign := cfg
	foreign.NATS.CredsFile = testenv.ForeignCreds(t, dir)
	if err := foreign.Validate(); err != nil {
		t.Fatalf("a well-formed creds file refused at start: %v", err)
	}
	nc, err = connectNATS(t, foreign.NATS)
	if err == nil {
		nc.Close()
		t.Fatal("a user of an unknown account was let in")
	}
	refused := foreign.NATS.RefusedError(err)
	if refused == nil || !strings.Contains(refused.Error(), "config key nats.creds_file") {
		t.Fatalf("RefusedError(%v) = %v, want an error naming nats.creds_file", err, refused)
	}
	raw, _ := os.ReadFile(foreign.NATS.CredsFile)
	for _, line := range strings.Split(string(raw), "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "SU") && strings.Contains(refused.Error(), line) {
			t.Fatalf("the seed is in the error: %v", refused)
		}
	}

	missing := cfg
	missing.NATS.CredsFile = filepath.Join(dir, "nonexistent.creds")
	if err := missing.Validate(); err == nil || !strings.Contains(err.Error(), "config key nats.creds_file") {
		t.Fatalf("Validate() with a missing creds file = %v, want an error naming nats.creds_file", err)
	}
}

// A real NATS server with nkey users: a seed whose public key the server
// does not list is refused with an error naming nats.nkey_file. (That a
// listed nkey gets in is TestNATSTLSVerifyWithPasswordAndNKey.)
func TestNATSNKeyFileRefusedNamesTheKey(t *testing.T) {
	listed, _ := nkeys.CreateUser()
	pub, _ := listed.PublicKey()
	srv, err := infra.StartNATS(infra.NATSConfig{DataDir: t.TempDir(), Addr: "127.0.0.1:0", NKeys: []string{pub}, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	other, _ := nkeys.CreateUser()
	seed, _ := other.Seed()
	cfg := Defaults()
	cfg.NATS.URL, cfg.NATS.NKeyFile = srv.ClientURL(), secretFile(t, "other.nk", string(seed))
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	nc, err := connectNATS(t, cfg.NATS)
	if err == nil {
		nc.Close()
		t.Fatal("an nkey the server does not list was let in")
	}
	if refused := cfg.NATS.RefusedError(err); refused == nil || !strings.Contains(refused.Error(), "config key nats.nkey_file") ||
		strings.Contains(refused.Error(), string(seed)) {
		t.Fatalf("RefusedError(%v) = %v, want an error naming nats.nkey_file, without the seed", err, refused)
	}

	// Not a refusal: nothing to blame on the credentials.
	srv.Close()
	if nc, err := connectNATS(t, cfg.NATS); err == nil {
		nc.Close()
		t.Fatal("connected to a stopped server")
	} else if r := cfg.NATS.RefusedError(err); r != nil {
		t.Fatalf("RefusedError(%v) = %v, want nil for a server that is away", err, r)
	}
}
