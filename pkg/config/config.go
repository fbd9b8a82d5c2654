// Package config is botctl serve's configuration: one YAML file, every key
// overridable by an environment variable and a flag, validated at start with
// errors that name the key.
//
// Precedence, lowest first: defaults, the YAML file (--config), environment
// (BOTCTL_<KEY>, dots as underscores), flags. Secrets come from the file, from
// BOTCTL_BOT_<ID>_SECRET, or from a secret_file; they never appear in logs,
// errors or status output (Bot.String hides them).
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is everything botctl serve reads at start.
type Config struct {
	// NodeID names this node in the registry, elections and logs. Default:
	// the host name. Must be unique in the cluster.
	NodeID string `yaml:"node_id"`
	// Env is this node's environment; per bot, a gate in etcd names the one
	// environment allowed to connect. Default "default".
	Env string `yaml:"env"`
	// DataDir holds the embedded etcd and NATS data and the local spool.
	DataDir string `yaml:"data_dir"`
	// Listen is the node's HTTP API (status, exec). Default 127.0.0.1:8391.
	Listen string `yaml:"listen"`

	Etcd     Etcd     `yaml:"etcd"`
	NATS     NATS     `yaml:"nats"`
	WeCom    WeCom    `yaml:"wecom"`
	Election Election `yaml:"election"`
	Worker   Worker   `yaml:"worker"`
	Bots     []Bot    `yaml:"bots"`
}

// Etcd is the control plane. No endpoints: an embedded single-node etcd in DataDir.
type Etcd struct {
	Endpoints   []string      `yaml:"endpoints"`
	DialTimeout time.Duration `yaml:"dial_timeout"`
}

// NATS is the data plane. No URL: an embedded NATS server in DataDir.
type NATS struct {
	URL string `yaml:"url"`
}

// WeCom is the long-connection endpoint and its timings.
type WeCom struct {
	// URL: wss://openws.work.weixin.qq.com in production. Empty with no
	// bots configured means demo mode (an in-process simulator).
	URL               string        `yaml:"url"`
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	AckTimeout        time.Duration `yaml:"ack_timeout"`
}

// Election timings; see package election for what each trades off.
type Election struct {
	TTL          time.Duration `yaml:"ttl"`
	SafetyMargin time.Duration `yaml:"safety_margin"`
}

// Worker is this node's compute side.
type Worker struct {
	Slots int `yaml:"slots"`
}

// Bot is one WeCom bot's credentials.
type Bot struct {
	ID         string `yaml:"id"`
	Secret     string `yaml:"secret"`
	SecretFile string `yaml:"secret_file"`
}

// String never shows the secret.
func (b Bot) String() string { return b.ID + ":<redacted>" }

// Defaults returns the configuration with nothing set.
func Defaults() Config {
	host, _ := os.Hostname()
	return Config{
		NodeID:   host,
		Env:      "default",
		DataDir:  "data",
		Listen:   "127.0.0.1:8391",
		Etcd:     Etcd{DialTimeout: 5 * time.Second},
		WeCom:    WeCom{HeartbeatInterval: 30 * time.Second, AckTimeout: 5 * time.Second},
		Election: Election{TTL: 20 * time.Second, SafetyMargin: 5 * time.Second},
		Worker:   Worker{Slots: 8},
	}
}

// Load reads the YAML file at path (none if empty) over the defaults, then
// the environment. Unknown keys in the file are errors: a typo must not
// silently fall back to a default. Secrets are resolved by Resolve, and
// everything is checked by Validate.
func Load(path string, environ []string) (Config, error) {
	cfg := Defaults()
	if path != "" {
		if err := cfg.applyFile(path); err != nil {
			return cfg, err
		}
	}
	if err := cfg.applyEnv(environ); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// applyFile reads the YAML file through the same key table as the
// environment and flags, so every error names its key.
func (c *Config) applyFile(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	byName := map[string]Key{}
	for _, k := range Keys {
		byName[k.Name] = k
	}
	var walk func(prefix string, m map[string]any) error
	walk = func(prefix string, m map[string]any) error {
		for name, v := range m {
			key := prefix + name
			if key == "bots" {
				if err := c.fileBots(v); err != nil {
					return fmt.Errorf("config %s: %w", path, err)
				}
				continue
			}
			if sub, ok := v.(map[string]any); ok {
				if err := walk(key+".", sub); err != nil {
					return err
				}
				continue
			}
			k, ok := byName[key]
			if !ok {
				return fmt.Errorf("config %s: unknown key %s (known: %s)", path, key, knownNames())
			}
			if err := k.Set(c, scalar(v)); err != nil {
				return fmt.Errorf("config %s: %w", path, err)
			}
		}
		return nil
	}
	return walk("", doc)
}

func (c *Config) fileBots(v any) error {
	list, ok := v.([]any)
	if !ok {
		return errors.New("config key bots: want a list of {id, secret | secret_file}")
	}
	for i, it := range list {
		m, ok := it.(map[string]any)
		if !ok {
			return fmt.Errorf("config key bots[%d]: want {id, secret | secret_file}", i)
		}
		var b Bot
		for k, v := range m {
			switch k {
			case "id":
				b.ID = scalar(v)
			case "secret":
				b.Secret = scalar(v)
			case "secret_file":
				b.SecretFile = scalar(v)
			default:
				return fmt.Errorf("config key bots[%d].%s: unknown (want id, secret, secret_file)", i, k)
			}
		}
		c.Bots = append(c.Bots, b)
	}
	return nil
}

// scalar turns a YAML value back into the string form env and flags use.
func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case []any:
		parts := make([]string, len(x))
		for i, p := range x {
			parts[i] = scalar(p)
		}
		return strings.Join(parts, ",")
	default:
		return fmt.Sprint(x)
	}
}

func knownNames() string {
	names := []string{"bots"}
	for _, k := range Keys {
		names = append(names, k.Name)
	}
	return strings.Join(names, ", ")
}

// Key is one configuration key: its name, its environment variable, and how
// a string sets it. Flags use the same table (package cmd/botctl).
type Key struct {
	Name  string // dotted YAML path, e.g. "etcd.endpoints"
	Flag  string // botctl serve's flag, without dashes
	Usage string
	set   func(*Config, string) error
}

// Env is the key's environment variable.
func (k Key) Env() string {
	return "BOTCTL_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(k.Name))
}

// Set parses s into the key's field of cfg.
func (k Key) Set(cfg *Config, s string) error {
	if err := k.set(cfg, s); err != nil {
		return fmt.Errorf("config key %s: %w", k.Name, err)
	}
	return nil
}

func str(f func(*Config) *string) func(*Config, string) error {
	return func(c *Config, s string) error { *f(c) = s; return nil }
}

func dur(f func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 20s, 5m)", s)
		}
		*f(c) = d
		return nil
	}
}

// Keys lists every key settable from the environment and flags.
var Keys = []Key{
	{"node_id", "node-id", "this node's unique id", str(func(c *Config) *string { return &c.NodeID })},
	{"env", "env", "this node's environment (the per-bot env gate)", str(func(c *Config) *string { return &c.Env })},
	{"data_dir", "data-dir", "data directory (embedded etcd/NATS, spool)", str(func(c *Config) *string { return &c.DataDir })},
	{"listen", "listen", "node HTTP API address", str(func(c *Config) *string { return &c.Listen })},
	{"etcd.endpoints", "etcd", "etcd endpoints, comma-separated (none: embedded)", func(c *Config, s string) error {
		c.Etcd.Endpoints = splitList(s)
		return nil
	}},
	{"etcd.dial_timeout", "etcd-dial-timeout", "etcd dial timeout", dur(func(c *Config) *time.Duration { return &c.Etcd.DialTimeout })},
	{"nats.url", "nats", "NATS URL (none: embedded)", str(func(c *Config) *string { return &c.NATS.URL })},
	{"wecom.url", "wecom-url", "WeCom WebSocket URL", str(func(c *Config) *string { return &c.WeCom.URL })},
	{"wecom.heartbeat_interval", "wecom-heartbeat", "WeCom ping period", dur(func(c *Config) *time.Duration { return &c.WeCom.HeartbeatInterval })},
	{"wecom.ack_timeout", "wecom-ack-timeout", "WeCom ack timeout", dur(func(c *Config) *time.Duration { return &c.WeCom.AckTimeout })},
	{"election.ttl", "election-ttl", "election session TTL", dur(func(c *Config) *time.Duration { return &c.Election.TTL })},
	{"election.safety_margin", "election-safety-margin", "leadership is dropped this long before the lease can expire", dur(func(c *Config) *time.Duration { return &c.Election.SafetyMargin })},
	{"worker.slots", "worker-slots", "concurrent tasks on this node", func(c *Config, s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		c.Worker.Slots = n
		return nil
	}},
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (c *Config) applyEnv(environ []string) error {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for _, k := range Keys {
		if v, ok := env[k.Env()]; ok {
			if err := k.Set(c, v); err != nil {
				return fmt.Errorf("%w (from $%s)", err, k.Env())
			}
		}
	}
	// Secrets of configured bots: BOTCTL_BOT_<ID>_SECRET.
	for i := range c.Bots {
		if v, ok := env[BotSecretEnv(c.Bots[i].ID)]; ok {
			c.Bots[i].Secret = v
		}
	}
	return nil
}

// BotSecretEnv is the variable that holds a bot's secret.
func BotSecretEnv(botID string) string {
	return "BOTCTL_BOT_" + strings.ToUpper(regexp.MustCompile(`[^A-Za-z0-9]`).ReplaceAllString(botID, "_")) + "_SECRET"
}

// ParseBot reads "ID:SECRET" (or "ID" alone, the secret then coming from
// the environment or a file).
func ParseBot(s string) (Bot, error) {
	id, secret, _ := strings.Cut(s, ":")
	if id == "" {
		return Bot{}, errors.New(`want ID:SECRET (e.g. --bot mybot:$SECRET, or --bot mybot with $BOTCTL_BOT_MYBOT_SECRET set)`)
	}
	return Bot{ID: id, Secret: secret}, nil
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Resolve reads secret files and environment secrets into Bots.
func (c *Config) Resolve(environ []string) error {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for i := range c.Bots {
		b := &c.Bots[i]
		if b.Secret == "" {
			b.Secret = env[BotSecretEnv(b.ID)]
		}
		if b.Secret == "" && b.SecretFile != "" {
			raw, err := os.ReadFile(b.SecretFile)
			if err != nil {
				return fmt.Errorf("config key bots[%d].secret_file: %w", i, err)
			}
			b.Secret = strings.TrimSpace(string(raw))
		}
	}
	return nil
}

// Validate checks everything at start, naming the key at fault.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config key %s: %s", key, fmt.Sprintf(format, args...)))
	}
	if !idRE.MatchString(c.NodeID) {
		bad("node_id", "%q: want 1-128 letters, digits, '_', '.', '-' (set --node-id)", c.NodeID)
	}
	if !idRE.MatchString(c.Env) {
		bad("env", "%q: want 1-128 letters, digits, '_', '.', '-'", c.Env)
	}
	if c.DataDir == "" {
		bad("data_dir", "empty: set --data-dir")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen", "%q: want HOST:PORT (%v)", c.Listen, err)
	}
	for i, e := range c.Etcd.Endpoints {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad(fmt.Sprintf("etcd.endpoints[%d]", i), "%q: want http://HOST:PORT or https://HOST:PORT", e)
		}
	}
	if c.Etcd.DialTimeout <= 0 {
		bad("etcd.dial_timeout", "must be positive, got %s", c.Etcd.DialTimeout)
	}
	if c.NATS.URL != "" {
		if u, err := url.Parse(c.NATS.URL); err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
			bad("nats.url", "%q: want nats://HOST:PORT", c.NATS.URL)
		}
	}
	if c.WeCom.URL != "" {
		if u, err := url.Parse(c.WeCom.URL); err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
			bad("wecom.url", "%q: want ws:// or wss:// (production: wss://openws.work.weixin.qq.com)", c.WeCom.URL)
		}
	}
	if c.WeCom.HeartbeatInterval <= 0 {
		bad("wecom.heartbeat_interval", "must be positive, got %s", c.WeCom.HeartbeatInterval)
	}
	if c.WeCom.AckTimeout <= 0 {
		bad("wecom.ack_timeout", "must be positive, got %s", c.WeCom.AckTimeout)
	}
	if c.Worker.Slots < 0 {
		bad("worker.slots", "must be 0 or more, got %d", c.Worker.Slots)
	}
	seen := map[string]bool{}
	for i, b := range c.Bots {
		key := fmt.Sprintf("bots[%d]", i)
		switch {
		case !idRE.MatchString(b.ID):
			bad(key+".id", "%q: want 1-128 letters, digits, '_', '.', '-'", b.ID)
		case seen[b.ID]:
			bad(key+".id", "bot %s is configured twice", b.ID)
		case b.Secret == "":
			bad(key+".secret", "bot %s has no secret: give --bot %s:SECRET, set $%s, or secret_file", b.ID, b.ID, BotSecretEnv(b.ID))
		}
		seen[b.ID] = true
	}
	return errors.Join(errs...)
}
