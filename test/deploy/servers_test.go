package deploy

import (
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.etcd.io/etcd/server/v3/embed"
)

// The example's etcd and NATS configurations are read by the servers' own
// parsers (the embedded etcd and nats-server libraries botctl already
// uses): every key known, the cluster of three, TLS with client
// verification, JetStream on. Certificate paths point at gen-certs.sh's
// files; nothing else is changed.
func TestExampleServerConfigsParse(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not found: no certificates for the example's server configs")
	}
	pki := t.TempDir()
	if out, err := exec.Command("sh", filepath.Join(repo(t), "scripts", "gen-certs.sh"), pki).CombinedOutput(); err != nil {
		t.Fatalf("gen-certs.sh: %v\n%s", err, out)
	}
	dir := filepath.Join(repo(t), "deploy", "example-cluster")
	for i, vm := range []string{"vm1", "vm2", "vm3"} {
		raw, err := os.ReadFile(filepath.Join(dir, "nats", vm+".conf"))
		if err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(t.TempDir(), vm+".conf")
		body := strings.NewReplacer("/etc/nats/pki/", pki+"/", "/var/lib/nats", t.TempDir()).Replace(string(raw))
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("nats %s: %v", vm, err)
		}
		if opts.ServerName != vm || !opts.JetStream || opts.Cluster.Name != "botctl" || len(opts.Routes) != 3 ||
			opts.TLSConfig == nil || opts.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert || opts.Cluster.TLSConfig == nil || opts.SystemAccount != "SYS" {
			t.Errorf("nats %s: name %q jetstream %v cluster %q routes %d tls %v verify %v cluster tls %v system %q",
				vm, opts.ServerName, opts.JetStream, opts.Cluster.Name, len(opts.Routes), opts.TLSConfig != nil, opts.TLSConfig != nil && opts.TLSConfig.ClientAuth == tls.RequireAndVerifyClientCert,
				opts.Cluster.TLSConfig != nil, opts.SystemAccount)
		}
		// A frozen peer's routes close in seconds (docs/operations.md, "A
		// frozen NATS server"); nats-server's default takes minutes.
		if opts.Cluster.PingInterval != 2*time.Second || opts.Cluster.MaxPingsOut != 3 {
			t.Errorf("nats %s: cluster ping_interval %v ping_max %d, want 2s and 3", vm, opts.Cluster.PingInterval, opts.Cluster.MaxPingsOut)
		}

		eraw, err := os.ReadFile(filepath.Join(dir, "etcd", vm+".conf.yml"))
		if err != nil {
			t.Fatal(err)
		}
		econf := filepath.Join(t.TempDir(), vm+".conf.yml")
		ebody := strings.NewReplacer("/etc/etcd/pki/", pki+"/", "/var/lib/etcd", t.TempDir()).Replace(string(eraw))
		if err := os.WriteFile(econf, []byte(ebody), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := embed.ConfigFromFile(econf)
		if err != nil {
			t.Fatalf("etcd %s: %v", vm, err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("etcd %s: %v", vm, err)
		}
		if cfg.Name != vm || !cfg.ClientTLSInfo.ClientCertAuth || !cfg.PeerTLSInfo.ClientCertAuth ||
			strings.Count(cfg.InitialCluster, "https://") != 3 || cfg.AdvertiseClientUrls[0].Host != "10.0.0.1"+string(rune('1'+i))+":2379" {
			t.Errorf("etcd %s: name %q client cert auth %v peer cert auth %v cluster %q advertise %v", vm, cfg.Name,
				cfg.ClientTLSInfo.ClientCertAuth, cfg.PeerTLSInfo.ClientCertAuth, cfg.InitialCluster, cfg.AdvertiseClientUrls)
		}
	}
}
