// Package deploy tests deploy/ and scripts/: the systemd units pass
// systemd-analyze verify, scripts/install.sh is idempotent and never
// overwrites a changed configuration without --force,
// scripts/gen-certs.sh makes certificates the CA verifies, every rule of
// deploy/prometheus-rules.yml says what it means and links to what to do,
// deploy/compose runs three nodes whose configs pass botctl config check, and no
// example in README.md, docs/, deploy/ or scripts/ puts a secret in argv.
package deploy

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/serve"
)

func repo(t *testing.T) string {
	t.Helper()
	// go test runs a test in its package's directory (two below the
	// root); runtime.Caller's file names carry no directory under -trimpath.
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// build builds botctl once per test that needs it.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "botctl")
	if out, err := testenv.GoBuild(repo(t), "-o", bin, "./cmd/botctl").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// Every unit and drop-in of deploy/ passes systemd-analyze verify. The
// binaries the units name do not exist on a test machine, and verify
// insists that ExecStart's do: they are pointed at the freshly built
// botctl (for botctl) and at /bin/true (etcd, nats-server), nothing else
// is changed.
func TestUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not found (not a systemd machine): the units are not verified here")
	}
	bin := build(t)
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := repo(t)
	units := map[string]string{
		"botctl.service":                "deploy/botctl.service",
		"etcd.service":                  "deploy/example-cluster/etcd.service",
		"nats-server.service":           "deploy/example-cluster/nats-server.service",
		"botctl.service.d/cluster.conf": "deploy/example-cluster/botctl.service.d/cluster.conf",
		"botctl-infra.service":          "deploy/botctl-infra.service",
		"botctl-exec.socket":            "deploy/botctl-exec.socket",
		"botctl-exec@.service":          "deploy/botctl-exec@.service",
	}
	repl := strings.NewReplacer("/usr/local/bin/botctl", bin, "/usr/local/bin/etcd", truePath, "/usr/local/bin/nats-server", truePath,
		"/usr/local/bin/answer", truePath)
	for name, src := range units {
		raw, err := os.ReadFile(filepath.Join(r, src))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if err := os.WriteFile(dst, []byte(repl.Replace(string(raw))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"verify", "--man=no"}
	for _, u := range []string{"botctl.service", "etcd.service", "nats-server.service", "botctl-infra.service", "botctl-exec.socket", "botctl-exec@1.service"} {
		args = append(args, filepath.Join(dir, u))
	}
	cmd := exec.Command(analyze, args...)
	// The drop-in is found beside the unit through the unit path.
	cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// Warnings (an unknown key, a key in the wrong section) are
	// "ignoring" lines with exit 0: a unit that says anything fails.
	if len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify warned:\n%s", out)
	}
}

// botctl.service has what the issue asks of it, to the letter.
func TestBotctlUnitContract(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repo(t), "deploy", "botctl.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(raw)
	for _, line := range []string{"Type=notify", "WatchdogSec=", "Restart=on-failure", "KillSignal=SIGTERM", "TimeoutStopSec=",
		"User=botctl", "ProtectSystem=strict", "PrivateTmp=yes", "NoNewPrivileges=yes", "CapabilityBoundingSet=\n",
		"ReadWritePaths=/var/lib/botctl", "EnvironmentFile=-/etc/botctl/botctl.env"} {
		if !strings.Contains(unit, "\n"+line) {
			t.Errorf("botctl.service lacks %q", strings.TrimSpace(line))
		}
	}
	// systemd kills a stop that takes longer than TimeoutStopSec: it must
	// exceed the longest graceful stop the node's own bounds allow, so
	// that a slow stop still resigns its bots instead of leaving them to
	// a deposition.
	if m := regexp.MustCompile(`\nTimeoutStopSec=(\S+)`).FindStringSubmatch(unit); m != nil {
		v := m[1]
		if strings.TrimRight(v, "0123456789") == "" {
			v += "s" // systemd's bare number is seconds
		}
		stop, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("TimeoutStopSec=%s: %v (this test reads Go durations such as 60s or 1m30s)", m[1], err)
		}
		// The margin covers what the bound leaves out: the worker's
		// hand-back of its running tasks, a loaded machine.
		if bound := serve.GracefulStopBound(); stop < bound+stopMargin {
			t.Errorf("TimeoutStopSec=%s does not exceed the node's longest graceful stop, %s (serve.GracefulStopBound), by %s", m[1], bound, stopMargin)
		}
	}
	dropIn, err := os.ReadFile(filepath.Join(repo(t), "deploy", "example-cluster", "botctl.service.d", "cluster.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dropIn), "\nLoadCredential=b1.secret:") {
		t.Error("the cluster drop-in loads no bot secret as a credential")
	}
}

func install(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{filepath.Join(repo(t), "scripts", "install.sh")}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// install.sh places binary, units, config and docs; a second run changes
// nothing; a changed config is refused without --force and replaced
// (the old one kept) with it.
func TestInstallIdempotent(t *testing.T) {
	bin := build(t)
	root := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "botctl.yaml")
	if err := os.WriteFile(cfg, []byte("node_id: vm1\nlisten: 127.0.0.1:8391\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--root", root, "--binary", bin, "--config", cfg, "--cluster"}
	out, err := install(t, base...)
	if err != nil {
		t.Fatalf("first install: %v\n%s", err, out)
	}
	for _, p := range []string{"usr/local/bin/botctl", "etc/systemd/system/botctl.service", "etc/systemd/system/etcd.service",
		"etc/systemd/system/nats-server.service", "etc/systemd/system/botctl.service.d/cluster.conf", "etc/botctl/botctl.yaml"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("not installed: %s", p)
		}
	}
	if !strings.Contains(out, "ok: node vm1") {
		t.Errorf("the installed config was not checked:\n%s", out)
	}
	checkDocsInstalled(t, root)
	out, err = install(t, base...)
	if err != nil || !strings.Contains(out, "nothing to do") || strings.Contains(out, "installed  ") {
		t.Fatalf("second install changed something: %v\n%s", err, out)
	}

	dest := filepath.Join(root, "etc", "botctl", "botctl.yaml")
	if err := os.WriteFile(dest, []byte("node_id: edited-by-hand\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = install(t, base...)
	if err == nil || !strings.Contains(out, "not overwritten") {
		t.Fatalf("changed config overwritten without --force: %v\n%s", err, out)
	}
	if raw, _ := os.ReadFile(dest); string(raw) != "node_id: edited-by-hand\n" {
		t.Fatalf("config changed after a refusal: %q", raw)
	}
	out, err = install(t, append(base, "--force")...)
	if err != nil {
		t.Fatalf("--force: %v\n%s", err, out)
	}
	if raw, _ := os.ReadFile(dest + ".bak"); string(raw) != "node_id: edited-by-hand\n" {
		t.Fatalf("the replaced config was not kept: %q", raw)
	}
	if raw, _ := os.ReadFile(dest); !strings.Contains(string(raw), "node_id: vm1") {
		t.Fatalf("config not replaced with --force: %q", raw)
	}
}

// checkDocsInstalled: README.md and every docs/*.md are in
// /usr/share/doc/botctl under root, as the repository has them, and every
// file:// page a unit of deploy/ names in Documentation= is there.
func checkDocsInstalled(t *testing.T, root string) {
	t.Helper()
	r := repo(t)
	docs, err := filepath.Glob(filepath.Join(r, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	for _, src := range append(docs, filepath.Join(r, "README.md")) {
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, "usr", "share", "doc", "botctl", filepath.Base(src))
		if got, err := os.ReadFile(dst); err != nil || string(got) != string(want) {
			t.Errorf("%s not installed as %s (%v)", filepath.Base(src), dst, err)
		}
	}
	units, _ := filepath.Glob(filepath.Join(r, "deploy", "*.service"))
	sockets, _ := filepath.Glob(filepath.Join(r, "deploy", "*.socket"))
	pages := 0
	for _, u := range append(units, sockets...) {
		raw, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^Documentation=(.*)$`).FindAllStringSubmatch(string(raw), -1) {
			for _, uri := range strings.Fields(m[1]) {
				path, ok := strings.CutPrefix(uri, "file://")
				if !ok {
					continue
				}
				pages++
				if _, err := os.Stat(filepath.Join(root, path)); err != nil {
					t.Errorf("%s: Documentation=%s names a file install.sh does not install", filepath.Base(u), uri)
				}
			}
		}
	}
	if pages == 0 {
		t.Error("no unit of deploy/ names a file:// page in Documentation=: this check checks nothing")
	}
}

// gen-certs.sh's certificates are signed by its CA, with the VM's IP.
func TestGenCerts(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl not found: scripts/gen-certs.sh not run")
	}
	dir := t.TempDir()
	for range 2 { // the second run keeps what the first made
		cmd := exec.Command("sh", filepath.Join(repo(t), "scripts", "gen-certs.sh"), dir, "10.1.0.1", "10.1.0.2", "10.1.0.3")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gen-certs.sh: %v\n%s", err, out)
		}
	}
	for _, c := range []string{"vm1", "vm2", "vm3", "botctl-client", "ops-client"} {
		out, err := exec.Command(openssl, "verify", "-CAfile", filepath.Join(dir, "ca.pem"), filepath.Join(dir, c+".pem")).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", c, err, out)
		}
	}
	out, err := exec.Command(openssl, "x509", "-noout", "-ext", "subjectAltName", "-in", filepath.Join(dir, "vm2.pem")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "10.1.0.2") {
		t.Errorf("vm2's certificate lacks its IP: %v\n%s", err, out)
	}
}

// Each example node's configuration passes botctl config check with its
// credentials in place: certificates from gen-certs.sh, secrets, the API
// token, under a stand-in for /run/credentials/botctl.service (the one
// change made to the files). The credentials are the ones cluster.conf's
// LoadCredential= lines load, from where they say: a file a node's YAML
// names that the drop-in does not load fails here, as it would under
// systemd. The node API's certificate is the VM's own (vmN.pem, as the
// example's README copies it) and must carry the IP the node listens on
// and registers, since that is what the other nodes dial.
func TestExampleClusterConfigsPassCheck(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not found: no certificates for the example's configs")
	}
	bin := build(t)
	pki := t.TempDir()
	if out, err := exec.Command("sh", filepath.Join(repo(t), "scripts", "gen-certs.sh"), pki).CombinedOutput(); err != nil {
		t.Fatalf("gen-certs.sh: %v\n%s", err, out)
	}
	loaded := loadCredentials(t)
	if len(loaded) == 0 {
		t.Fatal("cluster.conf has no LoadCredential= line")
	}
	secrets := map[string]string{"nats.password": "np", "api.token": "0123456789abcdef0123456789abcdef", "b1.secret": "s1"}
	listen := regexp.MustCompile(`(?m)^listen: (\S+):\d+`)
	named := regexp.MustCompile(`/run/credentials/botctl\.service/([^\s#]+)`)
	for _, vm := range []string{"vm1", "vm2", "vm3"} {
		// On vmN, /etc/botctl/pki/api*.pem are copies of vmN's server certificate.
		pkiFile := map[string]string{"api.pem": vm + ".pem", "api-key.pem": vm + "-key.pem"}
		creds := t.TempDir()
		for name, src := range loaded {
			var raw []byte
			switch dir, base := filepath.Split(src); dir {
			case "/etc/botctl/pki/":
				if f, ok := pkiFile[base]; ok {
					base = f
				}
				var err error
				if raw, err = os.ReadFile(filepath.Join(pki, base)); err != nil {
					t.Fatalf("cluster.conf loads %s from %s: gen-certs.sh makes no %s", name, src, base)
				}
			case "/etc/botctl/secrets/":
				v, ok := secrets[base]
				if !ok {
					t.Fatalf("cluster.conf loads %s from %s: no stand-in for that secret in this test", name, src)
				}
				raw = []byte(v + "\n")
			default:
				t.Fatalf("cluster.conf loads %s from %s, outside /etc/botctl/pki and /etc/botctl/secrets", name, src)
			}
			if err := os.WriteFile(filepath.Join(creds, name), raw, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		raw, err := os.ReadFile(filepath.Join(repo(t), "deploy", "example-cluster", "botctl", vm+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(string(raw), -1) {
			if _, ok := loaded[m[1]]; !ok {
				t.Errorf("%s.yaml names credential %s, which cluster.conf does not load", vm, m[1])
			}
		}
		if !strings.Contains(string(raw), "\n  cert_file: /run/credentials/botctl.service/api.pem") {
			t.Errorf("%s.yaml does not serve the node API over HTTPS (api.cert_file)", vm)
		}
		m := listen.FindStringSubmatch(string(raw))
		if m == nil {
			t.Fatalf("%s.yaml has no listen address", vm)
		}
		verifyServerCert(t, filepath.Join(creds, "api.pem"), filepath.Join(creds, "api-ca.pem"), m[1])

		cfg := filepath.Join(t.TempDir(), vm+".yaml")
		body := strings.ReplaceAll(string(raw), "/run/credentials/botctl.service/", creds+"/")
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "config", "check", cfg)
		cmd.Env = append(os.Environ(), "OPENAI_API_KEY=sk-test")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ok: node "+vm) {
			t.Errorf("%s: %v\n%s", vm, err, out)
		}
	}
}

// loadCredentials is cluster.conf's LoadCredential= lines: name → source path.
func loadCredentials(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repo(t), "deploy", "example-cluster", "botctl.service.d", "cluster.conf"))
	if err != nil {
		t.Fatal(err)
	}
	creds := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		v, ok := strings.CutPrefix(line, "LoadCredential=")
		if !ok {
			continue
		}
		name, src, ok := strings.Cut(v, ":")
		if !ok {
			t.Fatalf("cluster.conf: %q is not NAME:PATH", line)
		}
		creds[name] = src
	}
	return creds
}

// verifyServerCert checks that certFile, signed by caFile, is a server
// certificate for ip: what a client dialling https://ip:PORT accepts.
func verifyServerCert(t *testing.T, certFile, caFile, ip string) {
	t.Helper()
	pemCert, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pemCA, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemCert)
	if block == nil {
		t.Fatalf("%s holds no PEM block", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemCA) {
		t.Fatalf("%s holds no CA certificate", caFile)
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: ip, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the node API certificate (%s) is not one a client dialling %s accepts: %v", cert.Subject.CommonName, ip, err)
	}
}

// stopMargin is how much longer than serve.GracefulStopBound systemd must
// let a stop take.
const stopMargin = 15 * time.Second
