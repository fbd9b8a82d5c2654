package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&out)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// The CLI commands reach an etcd with client-cert auth and a NATS with TLS
// verify and a password through --config, and act on the configured
// prefix only.
func TestCLIOverTLSWithConfig(t *testing.T) {
	sec := testenv.StartSecured(t)
	ca, e, n := sec.CA, sec.Etcd, sec.NATS
	cliCert, cliKey := ca.Issue(t, "botctl-cli")
	dir := t.TempDir()
	pw := filepath.Join(dir, "nats.pw")
	os.WriteFile(pw, []byte(sec.NATSPassword+"\n"), 0o600)
	cfgFile := filepath.Join(dir, "botctl.yaml")
	os.WriteFile(cfgFile, []byte(fmt.Sprintf(`
etcd:
  endpoints: [%s]
  ca_file: %s
  cert_file: %s
  key_file: %s
nats:
  url: %s
  prefix: BOTCTL_STAGING
  ca_file: %s
  cert_file: %s
  key_file: %s
  user: botctl
  password_file: %s
`, e.Endpoints()[0], ca.CAFile, cliCert, cliKey, n.ClientURL(), ca.CAFile, cliCert, cliKey, pw)), 0o600)

	if out, err := run(t, "status", "--config", cfgFile, "--json"); err != nil || !strings.Contains(out, `"nodes"`) {
		t.Fatalf("status over TLS: %v\n%s", err, out)
	}
	if out, err := run(t, "tasks", "list", "--config", cfgFile, "--json"); err != nil || !strings.Contains(out, `"tasks"`) {
		t.Fatalf("tasks over TLS: %v\n%s", err, out)
	}
	// The CLI declared (and so would act on) the staging streams only.
	nc, err := nats.Connect(n.ClientURL(), nats.Secure(), nats.RootCAs(ca.CAFile), nats.ClientCert(cliCert, cliKey), nats.UserInfo(sec.NATSUser, sec.NATSPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Stream(ctx, "BOTCTL_STAGING_TASKS"); err != nil {
		t.Fatalf("staging stream: %v", err)
	}
	if _, err := js.Stream(ctx, "BOTCTL_TASKS"); err == nil {
		t.Fatal("the CLI declared the default prefix's stream too")
	}

	// Without the client certificate: refused, and the error says where to look.
	noCert := filepath.Join(dir, "nocert.yaml")
	os.WriteFile(noCert, []byte(fmt.Sprintf("etcd:\n  endpoints: [%s]\n  ca_file: %s\n", e.Endpoints()[0], ca.CAFile)), 0o600)
	if _, err := run(t, "status", "--config", noCert, "--timeout", "2s"); err == nil || !strings.Contains(err.Error(), "etcd.ca_file/cert_file/key_file") {
		t.Fatalf("status without a certificate: %v", err)
	}
}

func TestInfraAndDemoRefuseRemoteListen(t *testing.T) {
	for _, args := range [][]string{
		{"infra", "--data-dir", t.TempDir(), "--etcd-listen", "0.0.0.0:23791"},
		{"infra", "--data-dir", t.TempDir(), "--nats-listen", "10.1.2.3:4222"},
		{"serve", "--demo", "--demo-listen", "0.0.0.0:0", "--data-dir", t.TempDir()},
	} {
		_, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "--allow-remote") || !strings.Contains(err.Error(), "no authentication") {
			t.Errorf("%q: %v, want a refusal that names --allow-remote and says why", args, err)
		}
	}
}

// botctl tasks reaches an operator-mode NATS with nats.creds_file from
// --config; with a creds file of an account the server does not know it
// exits with an error naming nats.creds_file.
func TestCLITasksWithCredsFile(t *testing.T) {
	ns := testenv.StartOperatorNATS(t, "BOTCTL")
	dir := t.TempDir()
	config := func(name, creds string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(fmt.Sprintf("nats:\n  url: %s\n  creds_file: %s\n", ns.ClientURL(), creds)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if out, err := run(t, "tasks", "list", "--config", config("ok.yaml", ns.Creds(t, dir, "BOTCTL")), "--json"); err != nil || !strings.Contains(out, `"tasks"`) {
		t.Fatalf("tasks with the account's creds: %v\n%s", err, out)
	}
	_, err := run(t, "tasks", "list", "--config", config("foreign.yaml", testenv.ForeignCreds(t, dir)), "--timeout", "5s")
	if err == nil || !strings.Contains(err.Error(), "config key nats.creds_file") {
		t.Fatalf("tasks with an unknown account's creds: %v, want an error naming nats.creds_file", err)
	}
}
