package config

import (
	"context"
	"errors"
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
	clientv3 "go.etcd.io/etcd/client/v3"
)

func secretFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A real etcd serving TLS with --client-cert-auth, then RBAC: a node with
// the CA and its certificate gets in; without the certificate it is
// refused; with auth enabled, only with the right password.
func TestEtcdTLSClientCertAndPassword(t *testing.T) {
	ca := testenv.NewCA(t)
	srvCert, srvKey := ca.Issue(t, "etcd-server")
	cliCert, cliKey := ca.Issue(t, "botctl-node")
	e, _, err := infra.StartEtcdOnFreePorts(context.Background(), infra.EtcdConfig{DataDir: t.TempDir(), UnsafeNoFsync: true,
		CertFile: srvCert, KeyFile: srvKey, ClientCAFile: ca.CAFile, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !strings.HasPrefix(e.Endpoints()[0], "https://") {
		t.Fatalf("endpoint %s, want https://", e.Endpoints()[0])
	}

	cfg := Defaults()
	cfg.Etcd.Endpoints, cfg.Etcd.CAFile, cfg.Etcd.CertFile, cfg.Etcd.KeyFile = e.Endpoints(), ca.CAFile, cliCert, cliKey
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	put := func(t *testing.T, ec Etcd, key string) error {
		t.Helper()
		cc, err := ec.ClientConfig(ec.Endpoints)
		if err != nil {
			t.Fatal(err)
		}
		cli, err := clientv3.New(cc)
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = cli.Put(ctx, key, "v")
		return err
	}
	if err := put(t, cfg.Etcd, "with-cert"); err != nil {
		t.Fatalf("client with the certificate: %v", err)
	}
	noCert := cfg.Etcd
	noCert.CertFile, noCert.KeyFile = "", ""
	if err := put(t, noCert, "without-cert"); err == nil {
		t.Fatal("a client without a certificate was let in")
	}

	// RBAC on: root with a password.
	cc, _ := cfg.Etcd.ClientConfig(cfg.Etcd.Endpoints)
	admin, err := clientv3.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.UserAdd(ctx, "root", "root-pw-0123456789"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	// botctl's own user: read-write on /botctl/ only, as docs/security.md says.
	if _, err := admin.RoleAdd(ctx, "botctl"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RoleGrantPermission(ctx, "botctl", "/botctl/", clientv3.GetPrefixRangeEnd("/botctl/"), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserAdd(ctx, "botctl", "botctl-pw-0123456789"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserGrantRole(ctx, "botctl", "botctl"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	admin.Close()

	withPW := cfg.Etcd
	withPW.Username, withPW.PasswordFile = "botctl", secretFile(t, "etcd.pw", "botctl-pw-0123456789\n")
	cfg2 := cfg
	cfg2.Etcd = withPW
	if err := cfg2.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := put(t, withPW, "/botctl/with-password"); err != nil {
		t.Fatalf("client with the password: %v", err)
	}
	if err := put(t, withPW, "outside-botctl"); err == nil {
		t.Fatal("the botctl role wrote outside /botctl/")
	}
	wrong := withPW
	wrong.PasswordFile = secretFile(t, "wrong.pw", "nope")
	if err := put(t, wrong, "/botctl/wrong-password"); err == nil {
		t.Fatal("a wrong password was let in")
	}
	if err := put(t, cfg.Etcd, "/botctl/cert-only"); err == nil {
		t.Fatal("with auth enabled, a certificate whose CN is no etcd user was let in")
	}
}

// A real NATS server requiring TLS with verified client certificates and a
// user: user/password and nkey clients with the certificate get in and can
// declare the store; without the certificate, or with a wrong password,
// they are refused.
func TestNATSTLSVerifyWithPasswordAndNKey(t *testing.T) {
	ca := testenv.NewCA(t)
	srvCert, srvKey := ca.Issue(t, "nats-server")
	cliCert, cliKey := ca.Issue(t, "botctl-node")
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	srv, err := infra.StartNATS(infra.NATSConfig{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: zerolog.Nop(),
		CertFile: srvCert, KeyFile: srvKey, CAFile: ca.CAFile,
		Users: map[string]string{"botctl": "nats-pw-0123456789"}, NKeys: []string{pub}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	base := Defaults()
	base.NATS.URL, base.NATS.CAFile, base.NATS.CertFile, base.NATS.KeyFile = srv.ClientURL(), ca.CAFile, cliCert, cliKey
	connect := func(t *testing.T, n NATS) (*nats.Conn, error) {
		t.Helper()
		opts, err := n.Options()
		if err != nil {
			t.Fatal(err)
		}
		return nats.Connect(n.URL, append(opts, nats.Timeout(5*time.Second))...)
	}

	pw := base
	pw.NATS.User, pw.NATS.PasswordFile = "botctl", secretFile(t, "nats.pw", "nats-pw-0123456789\n")
	nk := base
	nk.NATS.NKeyFile = secretFile(t, "user.nk", string(seed))
	for name, cfg := range map[string]Config{"password": pw, "nkey": nk} {
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		nc, err := connect(t, cfg.NATS)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		js, _ := natsjs.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err = jetstream.Declare(ctx, js, jetstream.Options{Prefix: cfg.NATS.Prefix})
		cancel()
		nc.Close()
		if err != nil {
			t.Fatalf("%s: declare: %v", name, err)
		}
	}

	noCert := pw
	noCert.NATS.CertFile, noCert.NATS.KeyFile = "", ""
	if nc, err := connect(t, noCert.NATS); err == nil {
		nc.Close()
		t.Fatal("a client without a certificate was let in")
	}
	wrong := pw
	wrong.NATS.PasswordFile = secretFile(t, "wrong.pw", "nope")
	if nc, err := connect(t, wrong.NATS); err == nil {
		nc.Close()
		t.Fatal("a wrong password was let in")
	} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("wrong password: %v, want an authorization error", err)
	}
	noUser := base
	if nc, err := connect(t, noUser.NATS); err == nil {
		nc.Close()
		t.Fatal("a client with a certificate and no user was let in")
	}
}

func TestSecurityErrorsNameTheKey(t *testing.T) {
	ca := testenv.NewCA(t)
	cert, key := ca.Issue(t, "n")
	_, otherKey := ca.Issue(t, "other")
	pw := secretFile(t, "pw", "password-0123456789")
	short := secretFile(t, "short", "abc")
	open := secretFile(t, "open", "0123456789abcdef0123")
	os.Chmod(open, 0o644)
	notPEM := secretFile(t, "ca.txt", "hello")
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"etcd cert without key", func(c *Config) { c.Etcd.Endpoints = []string{"https://e:2379"}; c.Etcd.CertFile = cert }, "config key etcd.key_file"},
		{"etcd key without cert", func(c *Config) { c.Etcd.Endpoints = []string{"https://e:2379"}; c.Etcd.KeyFile = key }, "config key etcd.cert_file"},
		{"etcd pair mismatch", func(c *Config) {
			c.Etcd.Endpoints = []string{"https://e:2379"}
			c.Etcd.CertFile, c.Etcd.KeyFile = cert, otherKey
		}, "config keys etcd.cert_file / etcd.key_file"},
		{"etcd ca missing", func(c *Config) { c.Etcd.Endpoints = []string{"https://e:2379"}; c.Etcd.CAFile = "/nonexistent/ca.pem" }, "config key etcd.ca_file"},
		{"etcd ca not PEM", func(c *Config) { c.Etcd.Endpoints = []string{"https://e:2379"}; c.Etcd.CAFile = notPEM }, "config key etcd.ca_file"},
		{"etcd TLS over http", func(c *Config) { c.Etcd.Endpoints = []string{"http://e:2379"}; c.Etcd.CAFile = ca.CAFile }, "config key etcd.endpoints[0]"},
		{"etcd user without password", func(c *Config) { c.Etcd.Endpoints = []string{"https://e:2379"}; c.Etcd.Username = "root" }, "config key etcd.password_file"},
		{"etcd password without user", func(c *Config) { c.Etcd.Endpoints = []string{"https://e:2379"}; c.Etcd.PasswordFile = pw }, "config key etcd.username"},
		{"etcd password in clear", func(c *Config) {
			c.Etcd.Endpoints = []string{"http://10.0.0.1:2379"}
			c.Etcd.Username, c.Etcd.PasswordFile = "root", pw
		}, "config key etcd.endpoints[0]"},
		{"etcd password file world-readable", func(c *Config) {
			c.Etcd.Endpoints = []string{"https://e:2379"}
			c.Etcd.Username, c.Etcd.PasswordFile = "root", open
		}, "config key etcd.password_file"},
		{"etcd TLS on embedded", func(c *Config) { c.Etcd.CAFile = ca.CAFile }, "config key etcd.ca_file"},
		{"etcd credentials in URL", func(c *Config) { c.Etcd.Endpoints = []string{"https://root:pw@e:2379"} }, "config key etcd.endpoints[0]"},
		{"nats two auth methods", func(c *Config) {
			c.NATS.URL = "tls://n:4222"
			c.NATS.User, c.NATS.PasswordFile, c.NATS.NKeyFile = "u", pw, pw
		}, "config keys nats.nkey_file, nats.user"},
		{"nats user without password", func(c *Config) { c.NATS.URL = "tls://n:4222"; c.NATS.User = "u" }, "config key nats.password_file"},
		{"nats password without user", func(c *Config) { c.NATS.URL = "tls://n:4222"; c.NATS.PasswordFile = pw }, "config key nats.user"},
		{"nats nkey not a seed", func(c *Config) { c.NATS.URL = "tls://n:4222"; c.NATS.NKeyFile = pw }, "config key nats.nkey_file"},
		{"nats creds not creds", func(c *Config) { c.NATS.URL = "tls://n:4222"; c.NATS.CredsFile = pw }, "config key nats.creds_file"},
		{"nats creds missing", func(c *Config) { c.NATS.URL = "tls://n:4222"; c.NATS.CredsFile = "/nonexistent.creds" }, "config key nats.creds_file"},
		{"nats cert without key", func(c *Config) { c.NATS.URL = "tls://n:4222"; c.NATS.CertFile = cert }, "config key nats.key_file"},
		{"nats on embedded", func(c *Config) { c.NATS.User = "u" }, "config key nats.user"},
		{"nats password in URL", func(c *Config) { c.NATS.URL = "nats://u:hunter2@n:4222" }, "config key nats.url"},
		{"nats prefix lower case", func(c *Config) { c.NATS.Prefix = "botctl" }, "config key nats.prefix"},
		{"nats prefix dot", func(c *Config) { c.NATS.Prefix = "A.B" }, "config key nats.prefix"},
		{"open listen without token", func(c *Config) { c.Listen = "0.0.0.0:8391" }, "config key api.token_file"},
		{"LAN listen without token", func(c *Config) { c.Listen = "10.0.0.5:8391" }, "config key api.token_file"},
		{"short token", func(c *Config) { c.API.TokenFile = short }, "config key api.token_file"},
		{"world-readable token", func(c *Config) { c.API.TokenFile = open }, "config key api.token_file"},
		{"missing token", func(c *Config) { c.API.TokenFile = "/nonexistent/token" }, "config key api.token_file"},
		{"remote fixed worker without token", func(c *Config) { c.Dispatch.FixedWorker = "http://10.0.0.7:8391" }, "config key api.token_file"},
		{"api cert without key", func(c *Config) { c.API.CertFile = cert }, "config key api.key_file"},
		{"api key mismatch", func(c *Config) { c.API.CertFile, c.API.KeyFile = cert, otherKey }, "config keys api.cert_file / api.key_file"},
		{"api ca missing", func(c *Config) { c.API.CAFile = "/nonexistent/ca.pem" }, "config key api.ca_file"},
		{"plain ws to another machine", func(c *Config) { c.WeCom.URL = "ws://openws.work.weixin.qq.com" }, "config key wecom.url"},
		{"forward peer a URL", func(c *Config) { c.API.ForwardPeers = []string{"https://node-b:8391"} }, "config key api.forward_peers: entry 1"},
		{"forward peer a pattern", func(c *Config) { c.API.ForwardPeers = []string{"node-a", "*.internal"} }, "config key api.forward_peers: entry 2"},
		{"forward peer empty", func(c *Config) { c.API.ForwardPeers = []string{""} }, "config key api.forward_peers: entry 1"},
		{"forward peer bad port", func(c *Config) { c.API.ForwardPeers = []string{"node-b:99999"} }, "config key api.forward_peers: entry 1"},
		{"forward peer IPv6 port unbracketed", func(c *Config) { c.API.ForwardPeers = []string{"fd00::1:8391:x"} }, "config key api.forward_peers: entry 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "password-0123456789") {
				t.Fatalf("a secret in the error: %v", err)
			}
		})
	}
	// And what is fine.
	for name, edit := range map[string]func(*Config){
		"loopback ws simulator": func(c *Config) { c.WeCom.URL = "ws://127.0.0.1:8390/" },
		"localhost listen":      func(c *Config) { c.Listen = "localhost:8391" },
		"LAN listen with token": func(c *Config) {
			c.Listen = "10.0.0.5:8391"
			c.API.TokenFile = secretFile(t, "tok", "0123456789abcdef")
		},
		"cluster URLs":        func(c *Config) { c.NATS.URL = "nats://a:4222, nats://b:4222,nats://c:4222" },
		"staging prefix":      func(c *Config) { c.NATS.Prefix = "BOTCTL_STAGING" },
		"etcd https no files": func(c *Config) { c.Etcd.Endpoints = []string{"https://e:2379"} },
		"forward peers": func(c *Config) {
			c.API.ForwardPeers = []string{"node-b.internal", "10.0.0.12:8391", "[fd00::12]:8391", "fd00::13"}
		},
	} {
		c := Defaults()
		edit(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestSecurityKeysFromFileAndEnv(t *testing.T) {
	p := writeFile(t, `
etcd:
  endpoints: [https://10.0.0.1:2379]
  ca_file: /etc/botctl/tls/ca.pem
  cert_file: /etc/botctl/tls/n.pem
  key_file: /etc/botctl/tls/n-key.pem
  username: botctl
  password_file: /etc/botctl/etcd.password
nats:
  url: tls://10.0.0.2:4222
  prefix: BOTCTL_STAGING
  creds_file: /etc/botctl/nats.creds
  ca_file: /etc/botctl/tls/ca.pem
  cert_file: /etc/botctl/tls/n.pem
  key_file: /etc/botctl/tls/n-key.pem
api:
  token_file: /etc/botctl/api.token
ai:
  exec:
    env: [HOME, MODEL=small]
`)
	cfg, err := Load(p, []string{"BOTCTL_NATS_NKEY_FILE=/run/credentials/nk", "BOTCTL_NATS_CREDS_FILE=", "BOTCTL_API_TOKEN_FILE=/run/credentials/token"})
	if err != nil {
		t.Fatal(err)
	}
	want := Etcd{Endpoints: []string{"https://10.0.0.1:2379"}, DialTimeout: 5 * time.Second, CAFile: "/etc/botctl/tls/ca.pem", CertFile: "/etc/botctl/tls/n.pem",
		KeyFile: "/etc/botctl/tls/n-key.pem", Username: "botctl", PasswordFile: "/etc/botctl/etcd.password"}
	if got := cfg.Etcd; got.CAFile != want.CAFile || got.CertFile != want.CertFile || got.KeyFile != want.KeyFile || got.Username != want.Username || got.PasswordFile != want.PasswordFile {
		t.Errorf("etcd = %+v", got)
	}
	if n := cfg.NATS; n.Prefix != "BOTCTL_STAGING" || n.NKeyFile != "/run/credentials/nk" || n.CredsFile != "" || n.CAFile == "" || n.CertFile == "" || n.KeyFile == "" {
		t.Errorf("nats = %+v", n)
	}
	if cfg.API.TokenFile != "/run/credentials/token" {
		t.Errorf("api = %+v", cfg.API)
	}
	if e := cfg.AI.Exec.Env; len(e) != 2 || e[0] != "HOME" || e[1] != "MODEL=small" {
		t.Errorf("ai.exec.env = %q", e)
	}
	if Defaults().NATS.Prefix != "BOTCTL" {
		t.Errorf("default nats.prefix %q", Defaults().NATS.Prefix)
	}
}
