package config

import (
	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "botctl.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrecedenceFileThenEnv(t *testing.T) {
	p := writeFile(t, `
node_id: n1
etcd:
  endpoints: [http://10.0.0.1:2379]
election:
  ttl: 30s
bots:
  - id: b1
    secret: from-file
  - id: b2
`)
	cfg, err := Load(p, []string{"BOTCTL_ELECTION_TTL=40s", "BOTCTL_BOT_B2_SECRET=from-env", "BOTCTL_NODE_ID=n2"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Election.TTL != 40*time.Second || cfg.NodeID != "n2" {
		t.Fatalf("env did not override the file: %+v", cfg)
	}
	if cfg.Bots[0].Secret != "from-file" || cfg.Bots[1].Secret != "from-env" {
		t.Fatalf("bots = %+v", cfg.Bots)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestEmptyFileIsDefaults(t *testing.T) {
	cfg, err := Load(writeFile(t, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Election.TTL != 20*time.Second {
		t.Fatalf("ttl = %s", cfg.Election.TTL)
	}
	if strings.Join(cfg.Alert.WeComRobotLevels, ",") != "auto,human" || strings.Join(cfg.Alert.WebhookLevels, ",") != "auto,human" {
		t.Fatalf("alert levels = %v, %v; want every level by default", cfg.Alert.WeComRobotLevels, cfg.Alert.WebhookLevels)
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		yaml, env, want string
	}{
		{yaml: "etcd:\n  endpointz: [x]\n", want: "endpointz"},
		{yaml: "election:\n  ttl: soon\n", want: "ttl"},
		{env: "BOTCTL_WECOM_ACK_TIMEOUT=fast", want: "wecom.ack_timeout"},
		{yaml: "etcd:\n  endpoints: [localhost:2379]\n", want: "etcd.endpoints[0]"},
		{yaml: "etcd:\n  compact_retention: 30s\n", want: "etcd.compact_retention: 30s: want 0"},
		{yaml: "media:\n  allowed_hosts: [https://wework.qpic.cn]\n", want: "media.allowed_hosts[0]"},
		{yaml: "media:\n  allowed_hosts: [wework.qpic.cn, '*']\n", want: "media.allowed_hosts[1]: \"*\" means any public host: give it alone"},
		{yaml: "media:\n  allowed_hosts: ['*.qpic.cn']\n", want: "media.allowed_hosts[0]"},
		{yaml: "nats:\n  url: http://x:4222\n", want: "nats.url"},
		{yaml: "wecom:\n  url: https://x\n", want: "wecom.url"},
		{yaml: "listen: nope\n", want: "listen"},
		{yaml: "node_id: 'bad id'\n", want: "node_id"},
		{yaml: "bots:\n  - id: b1\n", want: "bots[0].secret"},
		{yaml: "bots:\n  - {id: b1, secret: x}\n  - {id: b1, secret: y}\n", want: "bots[1].id"},
		{yaml: "worker:\n  slots: -1\n", want: "worker.slots"},
		{yaml: "worker:\n  slots: 100000\n", want: "worker.slots"},
		{yaml: "worker:\n  leader_slots: 9000\n", want: "worker.leader_slots"},
		{env: "BOTCTL_WORKER_LEADER_SLOTS=-2", want: "worker.leader_slots"},
		{yaml: "worker:\n  leader_slots: -1\n", want: "worker.leader_slots"},
		{yaml: "worker:\n  leader_slots: every\n", want: "worker.leader_slots"},
		{yaml: "worker:\n  output_interval: 10ms\n", want: "worker.output_interval"},
		{env: "BOTCTL_WORKER_OUTPUT_INTERVAL=2h", want: "worker.output_interval"},
		{yaml: "ai:\n  max_concurrency: -1\n", want: "ai.max_concurrency"},
		{env: "BOTCTL_AI_MAX_CONCURRENCY=many", want: "ai.max_concurrency"},
		{yaml: "push:\n  heartbeat_line: still working\n", want: "push.heartbeat_line"},
		{yaml: "nats:\n  replicas: 2\n", want: "nats.replicas"},
		{yaml: "push:\n  budget: 31\n", want: "push.budget"},
		{yaml: "push:\n  budget_hourly: 1001\n", want: "push.budget_hourly"},
		{yaml: "ai:\n  kind: oracle\n", want: "ai.kind"},
		{yaml: "dispatch:\n  fixed_worker: 10.0.0.1\n", want: "dispatch.fixed_worker"},
		{yaml: "alert:\n  wecom_robot_levels: [page]\n", want: "alert.wecom_robot_levels"},
		{yaml: "alert:\n  webhook_levels: []\n", want: "alert.webhook_levels"},
		{env: "BOTCTL_ALERT_WEBHOOK_LEVELS=auto,urgent", want: "alert.webhook_levels"},
	} {
		var env []string
		if tc.env != "" {
			env = []string{tc.env}
		}
		cfg, err := Load(writeFile(t, tc.yaml), env)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("yaml %q env %q: err = %v, want it to name %q", tc.yaml, tc.env, err, tc.want)
		}
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	b := Bot{ID: "b1", Secret: "hunter2"}
	if strings.Contains(b.String(), "hunter2") {
		t.Fatal("Bot.String shows the secret")
	}
	cfg := Defaults()
	cfg.Bots = []Bot{{ID: "b1"}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "BOTCTL_BOT_B1_SECRET") {
		t.Fatalf("missing secret error should name the variable: %v", err)
	}
}

func TestSecretFile(t *testing.T) {
	sf := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(sf, []byte("s3cret\n"), 0o600)
	cfg := Defaults()
	cfg.Bots = []Bot{{ID: "b1", SecretFile: sf}}
	if err := cfg.Resolve(nil); err != nil {
		t.Fatal(err)
	}
	if cfg.Bots[0].Secret != "s3cret" {
		t.Fatalf("secret = %q", cfg.Bots[0].Secret)
	}
	cfg.Bots = []Bot{{ID: "b1", SecretFile: sf + ".missing"}}
	if err := cfg.Resolve(nil); err == nil || !strings.Contains(err.Error(), "bots[0].secret_file") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseBot(t *testing.T) {
	b, err := ParseBot("b1:s:with:colons")
	if err != nil || b.ID != "b1" || b.Secret != "s:with:colons" {
		t.Fatalf("%+v %v", b, err)
	}
	if _, err := ParseBot(":x"); err == nil {
		t.Fatal("empty id accepted")
	}
}

// The example shipped in deploy/ must load and validate (with the secret
// and API key it names provided).
func TestDeployExampleLoads(t *testing.T) {
	// The files it names, made for real under a temp /etc/botctl.
	etc := t.TempDir()
	os.MkdirAll(filepath.Join(etc, "tls"), 0o700)
	ca := testenv.NewCA(t)
	cert, key := ca.Issue(t, "node-a")
	for from, to := range map[string]string{ca.CAFile: "tls/ca.pem", cert: "tls/node-a.pem", key: "tls/node-a-key.pem"} {
		raw, _ := os.ReadFile(from)
		os.WriteFile(filepath.Join(etc, to), raw, 0o600)
	}
	os.WriteFile(filepath.Join(etc, "YOUR_BOT_ID.secret"), []byte("s"), 0o600)
	os.WriteFile(filepath.Join(etc, "api.token"), []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	os.WriteFile(filepath.Join(etc, "nats.password"), []byte("pw\n"), 0o600)
	os.WriteFile(filepath.Join(etc, "cluster.key"), []byte(strings.Repeat("ab", 32)+"\n"), 0o600)
	os.WriteFile(filepath.Join(etc, "wecom_robot.url"), []byte("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k\n"), 0o600)
	raw, err := os.ReadFile("../../deploy/botctl.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, strings.ReplaceAll(string(raw), "/etc/botctl/", etc+"/"))
	cfg, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPENAI_API_KEY", "sk-test")
	if err := cfg.Resolve(nil); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.NodeID != "node-a" || len(cfg.Etcd.Endpoints) != 3 || cfg.AI.Kind != "openai" || cfg.Push.Budget != 20 || cfg.Bots[0].Secret != "s" ||
		cfg.Bots[0].Owner != "ops-oncall" || cfg.Election.PulseTimeout != 3*time.Second || cfg.Alert.WeComRobotURLFile == "" || strings.Join(cfg.Alert.WeComRobotLevels, ",") != "human" || strings.Join(cfg.Alert.WebhookLevels, ",") != "auto,human" || cfg.Secrets.KeyFile != filepath.Join(etc, "cluster.key") {
		t.Fatalf("example read as %+v", cfg)
	}
}

// The defaults carry thousands of simultaneous I/O-bound answers on three
// nodes, and the task queue's TaskMaxRunning stays above every node's
// slots together.
func TestCapacityDefaults(t *testing.T) {
	cfg := Defaults()
	cfg.resolveSlots(4 << 30) // a 4 GiB machine (TestDeriveSlots: the rule)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	w := cfg.Worker
	if three := w.LeaderSlots + 2*w.Slots; three < 10000 {
		t.Fatalf("three nodes hold %d answers at once (slots %d, leader_slots %d), want thousands", three, w.Slots, w.LeaderSlots)
	}
	if w.LeaderSlots > w.Slots {
		t.Fatalf("leader_slots %d > slots %d", w.LeaderSlots, w.Slots)
	}
	if cfg.AI.MaxConcurrency != 0 {
		t.Fatalf("ai.max_concurrency default = %d, want 0 (no limit beyond slots)", cfg.AI.MaxConcurrency)
	}
	if 8*MaxSlots > jetstream.DefaultTaskMaxRunning {
		t.Fatalf("8 nodes of MaxSlots (%d) exceed TaskMaxRunning %d", MaxSlots, jetstream.DefaultTaskMaxRunning)
	}
	c, err := Load(writeFile(t, "ai:\n  max_concurrency: 40\n"), []string{"BOTCTL_WORKER_SLOTS=600"})
	if err != nil {
		t.Fatal(err)
	}
	if c.AI.MaxConcurrency != 40 || c.Worker.Slots != 600 {
		t.Fatalf("read max_concurrency %d, slots %d", c.AI.MaxConcurrency, c.Worker.Slots)
	}
}

// Credentials in wecom.url are refused at start, naming the key and
// without echoing the password: the WebSocket dial would refuse the URL
// only when the node first connects ("malformed ws or wss URL").
func TestWeComURLWithCredentialsRefused(t *testing.T) {
	c := Defaults()
	c.Bots = []Bot{{ID: "b1", Secret: "s1"}}
	c.WeCom.URL = "wss://ops:hunter2@openws.work.weixin.qq.com"
	err := c.Validate()
	if err == nil {
		t.Fatal("a wecom.url with user:password@ passed validation")
	}
	if msg := err.Error(); !strings.Contains(msg, "wecom.url") || !strings.Contains(msg, "credentials") || strings.Contains(msg, "hunter2") {
		t.Fatalf("error %q: want it to name wecom.url and credentials, without the password", msg)
	}
	c.WeCom.URL = "wss://openws.work.weixin.qq.com"
	if err := c.Validate(); err != nil {
		t.Fatalf("the production URL: %v", err)
	}
}

// TestAIBackendKeys: the dify, http and openai sampling keys are read from
// the file and the environment, like every key.
func TestAIBackendKeys(t *testing.T) {
	p := writeFile(t, `
ai:
  kind: dify
  openai:
    max_tokens: 512
    temperature: 0.7
    timeout: 2m
  dify:
    base_url: https://dify.example.com/v1
    api_key_file: /etc/botctl/dify.key
    timeout: 3m
  http:
    url: https://n8n.example.com/webhook/x
    token_file: /etc/botctl/n8n.token
`)
	cfg, err := Load(p, []string{"BOTCTL_AI_HTTP_TIMEOUT=4m"})
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.AI
	if a.OpenAI.MaxTokens != 512 || a.OpenAI.Temperature != 0.7 || a.OpenAI.Timeout != 2*time.Minute {
		t.Errorf("openai %+v", a.OpenAI)
	}
	if a.Dify != (AIDify{BaseURL: "https://dify.example.com/v1", APIKeyFile: "/etc/botctl/dify.key", Timeout: 3 * time.Minute}) {
		t.Errorf("dify %+v", a.Dify)
	}
	if a.HTTP != (AIHTTP{URL: "https://n8n.example.com/webhook/x", TokenFile: "/etc/botctl/n8n.token", Timeout: 4 * time.Minute}) {
		t.Errorf("http %+v", a.HTTP)
	}
	if _, err := Load(writeFile(t, "ai:\n  openai:\n    temperature: warm\n"), nil); err == nil || !strings.Contains(err.Error(), "config key ai.openai.temperature") {
		t.Errorf("a temperature that is no number: %v, want an error naming the key", err)
	}
}

// secrets.key_file is set by YAML and by BOTCTL_SECRETS_KEY_FILE (which
// wins), and checked at start: a file that is not a cluster key is
// refused naming the key and the file; unset is valid.
func TestSecretsKeyFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "cluster.key")
	os.WriteFile(good, []byte(strings.Repeat("0f", 32)), 0o600)
	bad := filepath.Join(dir, "bad.key")
	os.WriteFile(bad, []byte("not a key"), 0o600)
	p := writeFile(t, "secrets: {key_file: "+bad+"}\n")
	cfg, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Secrets.KeyFile != bad {
		t.Fatalf("from YAML: %q", cfg.Secrets.KeyFile)
	}
	err = cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "config key secrets.key_file") || !strings.Contains(err.Error(), bad) {
		t.Errorf("a bad key file: %v, want an error naming secrets.key_file and %s", err, bad)
	}
	cfg, err = Load(p, []string{"BOTCTL_SECRETS_KEY_FILE=" + good})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Secrets.KeyFile != good {
		t.Errorf("from the environment: %q, want %q", cfg.Secrets.KeyFile, good)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("a good key file: %v", err)
	}
	cfg, _ = Load("", nil)
	if err := cfg.Validate(); err != nil {
		t.Errorf("unset: %v", err)
	}
}

// worker.leader_slots: 0 is "the leader runs no answers", "all" is "as
// many as worker.slots"; both are valid.
func TestLeaderSlotsZeroAndAll(t *testing.T) {
	for _, c := range []struct {
		yaml, env string
		want      int
	}{
		{yaml: "worker:\n  leader_slots: 0\n", want: 0},
		{yaml: "worker:\n  leader_slots: all\n", want: LeaderSlotsAll},
		{env: "BOTCTL_WORKER_LEADER_SLOTS=all", want: LeaderSlotsAll},
		{yaml: "worker:\n  leader_slots: 12\n", want: 12},
		{yaml: "", want: DefaultLeaderSlots},
	} {
		var env []string
		if c.env != "" {
			env = []string{c.env}
		}
		cfg, err := Load(writeFile(t, c.yaml), env)
		if err == nil {
			err = cfg.Validate()
		}
		if err != nil || cfg.Worker.LeaderSlots != c.want {
			t.Errorf("yaml %q env %q: leader_slots %d, %v; want %d", c.yaml, c.env, cfg.Worker.LeaderSlots, err, c.want)
		}
	}
}
