package serve

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// Credentials rotated on the NATS servers under a running node: the
// server drops the node's connection, refuses its reconnects, and nats.go
// closes it for good. The node does not run on without JetStream (holding
// the bot, spooling forever): Run returns an error naming the key to fix.
func TestRunStopsWhenNATSRefusesItsCredentialsLater(t *testing.T) {
	t.Parallel()
	e := startEtcd(t)
	wecomURL := startSim(t)
	opts := &natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Username: "botctl", Password: "first-password-0123", NoLog: true, NoSigs: true}
	ns, err := natsserver.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		t.Fatal("NATS not ready")
	}
	t.Cleanup(ns.Shutdown)

	cfg := nodeConfig(t, wecomURL, e, ns.ClientURL())
	pw := filepath.Join(t.TempDir(), "nats.pw")
	if err := os.WriteFile(pw, []byte("first-password-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.NATS.User, cfg.NATS.PasswordFile = "botctl", pw
	rn, err := startNode(t, cfg)
	if err != nil {
		t.Fatalf("Run with the right password: %v", err)
	}

	// The rotation as a restart with the new password (same port, same
	// data). Not ReloadOptions in-process: nats-server 2.15 reads its
	// options unlocked on the direct-get path, and the race detector
	// flags that inside the server (seen in this test).
	rotated := *opts
	rotated.Password = "second-password-4567"
	rotated.Port = ns.Addr().(*net.TCPAddr).Port
	ns.Shutdown()
	ns.WaitForShutdown()
	ns2, err := natsserver.NewServer(&rotated)
	if err != nil {
		t.Fatal(err)
	}
	go ns2.Start()
	if !ns2.ReadyForConnections(30 * time.Second) {
		t.Fatal("NATS not ready after the rotation")
	}
	t.Cleanup(ns2.Shutdown)
	select {
	case err := <-rn.Done:
		rn.Done <- err
		t.Logf("Run: %v", err)
		if err == nil || !strings.Contains(err.Error(), "config key nats.password_file") {
			t.Fatalf("Run = %v, want an error naming nats.password_file", err)
		}
		if strings.Contains(err.Error(), "first-password") || strings.Contains(err.Error(), "second-password") {
			t.Fatalf("the error shows a password: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the node still runs 90s after NATS stopped accepting its credentials")
	}
}
