package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// composeService is what this test reads of a service of
// deploy/compose/compose.yaml.
type composeService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	NetworkMode string            `yaml:"network_mode"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
}

// deploy/compose runs three botctl nodes beside etcd, NATS and the
// simulator: the file parses, the etcd and NATS images are the versions
// botctl is built and tested against (go.mod), every service shares the
// simulator's network namespace (the nodes reach everything on loopback,
// where plain ws://, http:// and nats:// are allowed), the nodes' names
// and API ports differ, each keeps its state in a volume at
// /var/lib/botctl, and each node's config passes botctl config check with
// the environment compose gives it.
func TestComposeCluster(t *testing.T) {
	dir := filepath.Join(repo(t), "deploy", "compose")
	raw, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]composeService `yaml:"services"`
		Volumes  map[string]any            `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	gomod, err := os.ReadFile(filepath.Join(repo(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for svc, module := range map[string]string{"etcd": "go.etcd.io/etcd/server/v3", "nats": "github.com/nats-io/nats-server/v2"} {
		s, ok := file.Services[svc]
		if !ok {
			t.Errorf("compose.yaml has no %s service", svc)
			continue
		}
		m := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(module) + ` v(\S+)`).FindSubmatch(gomod)
		if m == nil {
			t.Fatalf("go.mod does not require %s", module)
		}
		if _, tag, _ := strings.Cut(s.Image, ":"); strings.TrimPrefix(tag, "v") != string(m[1]) {
			t.Errorf("service %s runs %s; botctl is built with %s v%s: use that version", svc, s.Image, module, m[1])
		}
	}
	if _, ok := file.Services["wecomsim"]; !ok {
		t.Fatal("compose.yaml has no wecomsim service (the nodes' WeCom)")
	}

	bin := build(t)
	var nodes, ids, listens []string
	for name, s := range file.Services {
		if name != "wecomsim" && s.NetworkMode != "service:wecomsim" {
			t.Errorf("service %s: network_mode %q, want service:wecomsim (the nodes reach it on 127.0.0.1)", name, s.NetworkMode)
		}
		if !slices.Contains(s.Command, "serve") {
			continue
		}
		nodes = append(nodes, name)
		var config, state string
		for _, v := range s.Volumes {
			src, dst, _ := strings.Cut(v, ":")
			dst, _, _ = strings.Cut(dst, ":")
			switch dst {
			case "/etc/botctl/botctl.yaml":
				config = src
			case "/var/lib/botctl":
				state = src
			}
		}
		if _, ok := file.Volumes[state]; !ok {
			t.Errorf("node %s keeps /var/lib/botctl in %q, not a named volume of compose.yaml", name, state)
		}
		if config == "" || !slices.Contains(s.Command, "/etc/botctl/botctl.yaml") {
			t.Errorf("node %s: no config mounted at /etc/botctl/botctl.yaml, or serve not given --config /etc/botctl/botctl.yaml", name)
			continue
		}
		cfg := filepath.Join(dir, config)
		body, err := os.ReadFile(cfg)
		if err != nil {
			t.Errorf("node %s mounts %s: %v", name, config, err)
			continue
		}
		ids = append(ids, field(t, body, "node_id"))
		listens = append(listens, field(t, body, "listen"))

		cmd := exec.Command(bin, "config", "check", cfg)
		cmd.Env = os.Environ()
		for k, v := range s.Environment {
			cmd.Env = append(cmd.Env, k+"="+composeDefault(v))
		}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ok: node ") {
			t.Errorf("node %s (%s): botctl config check: %v\n%s", name, config, err, out)
		}
	}
	if len(nodes) != 3 {
		t.Errorf("compose.yaml runs %d botctl nodes (%v), want 3", len(nodes), nodes)
	}
	for what, vals := range map[string][]string{"node_id": ids, "listen": listens} {
		slices.Sort(vals)
		if len(slices.Compact(slices.Clone(vals))) != len(vals) {
			t.Errorf("the nodes share a %s (%v): in one network namespace each needs its own", what, vals)
		}
	}
}

// field is a top-level scalar of a YAML file.
func field(t *testing.T, body []byte, key string) string {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	s, _ := m[key].(string)
	return s
}

// composeDefault is v with each ${NAME:-default} replaced by its default,
// as compose does with NAME unset.
func composeDefault(v string) string {
	return regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}`).ReplaceAllString(v, "$1")
}
