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
	"slices"
	"strings"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/redact"
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
	// Not a loopback address: api.token_file is required.
	Listen string `yaml:"listen"`
	API    API    `yaml:"api"`

	Etcd     Etcd     `yaml:"etcd"`
	NATS     NATS     `yaml:"nats"`
	WeCom    WeCom    `yaml:"wecom"`
	Election Election `yaml:"election"`
	Worker   Worker   `yaml:"worker"`
	AI       AI       `yaml:"ai"`
	Dispatch Dispatch `yaml:"dispatch"`
	Access   Access   `yaml:"access"`
	Memory   Memory   `yaml:"memory"`
	Limits   Limits   `yaml:"limits"`
	Push     Push     `yaml:"push"`
	Backfill Backfill `yaml:"backfill"`
	Spool    Spool    `yaml:"spool"`
	Health   Health   `yaml:"health"`
	Recovery Recovery `yaml:"recovery"`
	Alert    Alert    `yaml:"alert"`
	Media    Media    `yaml:"media"`
	Log      Log      `yaml:"log"`
	Secrets  Secrets  `yaml:"secrets"`
	Bots     []Bot    `yaml:"bots"`
}

// Backfill is the gap backfill: messages a bot missed (no connection, a
// leader that died) found in a history source at the start of every term
// and answered late, by push.
type Backfill struct {
	// HistoryURL is the base URL of the WeCom simulator's control API
	// (GET /control/history), a history source for tests and the demo.
	// "" (the default, production): WeCom's own message history, the "msg"
	// MCP server each bot's connection names; where the bot's msg
	// capability is not authorized, a gap is marked and paged instead.
	HistoryURL string `yaml:"history_url"`
	// Overlap is how far before the inbound watermark a pass reads.
	// Default 60s.
	Overlap time.Duration `yaml:"overlap"`
	// MaxMessages bounds the missed messages one pass answers. Default 500.
	MaxMessages int `yaml:"max_messages"`
	// Rate bounds how fast a pass hands missed messages to compute
	// (messages per second), so a long gap does not land on the workers
	// and the pusher at once. Default 20.
	Rate float64 `yaml:"rate"`
	// AuditEvery is how often a bot's leader reads the history of the
	// time since its last read, besides the passes at the start of a term
	// and after an incident: a connection deaf for less than the silence
	// alarm takes (a sparse bot's threshold can be minutes) raises no
	// incident, and what it missed was answered by nobody. Default 1m.
	AuditEvery time.Duration `yaml:"audit_every"`
}

// Dispatch is the fallback tiers.
type Dispatch struct {
	// FixedWorker is tier 2: a worker node's API base URL ("" skips it).
	FixedWorker string `yaml:"fixed_worker"`
}

// Access is the leader's inbound path: who may ask, and what users read
// besides answers. Every key may be set per bot (bots[].access). An empty
// text is the default one.
type Access struct {
	// AllowUsers and AllowChats, when not empty, are the only user ids and
	// group chat ids served; the others get a polite refusal.
	AllowUsers       []string `yaml:"allow_users"`
	AllowChats       []string `yaml:"allow_chats"`
	MaxQuestionBytes int      `yaml:"max_question_bytes"`
	// ReceiptText is the receipt, the answer stream's first frame.
	ReceiptText string `yaml:"receipt_text"`
	// BusyText answers a message sent while the conversation's previous
	// question is still being answered.
	BusyText string `yaml:"busy_text"`
	// UnsupportedText answers a message of a type the bot does not take
	// (an image, a file); one %s, if any, is the type.
	UnsupportedText string `yaml:"unsupported_text"`
	// WelcomeText answers a user who opens the chat ("": none).
	WelcomeText string `yaml:"welcome_text"`
	// WelcomeCard, a template card's JSON object, answers instead of
	// WelcomeText ("": none).
	WelcomeCard string `yaml:"welcome_card"`
	// ReportedVersion is the version the bot reports when WeCom asks
	// (enter_check_update); "" reports botctl's own version.
	ReportedVersion string `yaml:"reported_version"`
	// LateNote starts the answer to a message the bot missed while it had
	// no connection, answered late by push.
	LateNote string `yaml:"late_note"`
	// LimitText answers a message over one of the bot's limits (limits:
	// section); no task runs.
	LimitText string `yaml:"limit_text"`
}

// Push is the pusher: pacing and WeCom's stream window.
type Push struct {
	// Budget is frames per minute per conversation, replies and pushes
	// together. Default 20, under WeCom's 30.
	Budget int `yaml:"budget"`
	// BudgetHourly is frames per hour per conversation, beside Budget.
	// Default 900, under WeCom's 1,000 (which a frame over may be dropped
	// for without a refusal).
	BudgetHourly int           `yaml:"budget_hourly"`
	StreamWindow time.Duration `yaml:"stream_window"`
	Heartbeat    time.Duration `yaml:"heartbeat"`
	// HeartbeatLine is the status line shown after Heartbeat without news,
	// with minutes and seconds elapsed (two %d verbs).
	HeartbeatLine string `yaml:"heartbeat_line"`
	// QueuedLine replaces HeartbeatLine while the task waits for a worker
	// (every slot busy): the user knows it is queued, not being answered.
	QueuedLine string `yaml:"queued_line"`
	// TruncatedNote ends a stream closed before its window ends.
	TruncatedNote string `yaml:"truncated_note"`
	// HandoverNote ends a stream a stopping leader closes: the next
	// leader cannot continue it, and pushes the complete answer.
	HandoverNote string `yaml:"handover_note"`
	// ReplayExpiry: a complete answer still owed by push this long after
	// it was computed (the bot was away that long) is not sent late; its
	// delivery fails for good and a person is told (a data incident).
	// Default 24h.
	ReplayExpiry time.Duration `yaml:"replay_expiry"`
}

// NATS is the data plane. No URL: an embedded NATS server in DataDir
// (loopback, no TLS, no users: none of the TLS and credential keys apply).
type NATS struct {
	URL string `yaml:"url"`
	// Replicas of the task stream, its consumer and every bucket: 1 on
	// the embedded server, 3 (or 5) on a NATS cluster. Default 1.
	Replicas int `yaml:"replicas"`
	// Prefix names every stream and bucket (<Prefix>_TASKS, …) and the task
	// subjects (<prefix>.tasks.…): two environments sharing one NATS
	// account need two prefixes, or each runs the other's tasks. Upper
	// case. Default BOTCTL.
	Prefix string `yaml:"prefix"`
	// PingInterval is how often the node pings its NATS server when the
	// connection is otherwise quiet; after MaxPingsOut pings without an
	// answer the connection is taken as dead and the node reconnects (to
	// another server of the cluster when the URL names several). A frozen
	// server (SIGSTOP, a link that drops packets without a reset) is so
	// noticed in about PingInterval × (MaxPingsOut+1). Default 5s (nats.go's
	// own, 2 minutes, noticed one after about 4 to 6 minutes). Lower is
	// sooner but a busy server answers pings late too.
	PingInterval time.Duration `yaml:"ping_interval"`
	// MaxClockSkew bounds how far this node's clock may be from
	// JetStream's (the time its stream leader stamps on what it stores,
	// pkg/skew): nodes compare the times others wrote (deadlines, send
	// windows) with their own, so a node off by more campaigns for no bot
	// and runs no task until its time sync is fixed. Default 5s; 0 turns
	// the check off.
	MaxClockSkew time.Duration `yaml:"max_clock_skew"`
	// JetStreamFailover: see nats.go in this package. Default 30s; 0 off.
	JetStreamFailover time.Duration `yaml:"jetstream_failover"`
	// One way to authenticate, at most: CredsFile (a user JWT and seed,
	// `nsc generate creds`), NKeyFile (a user nkey seed, `nk -gen user`),
	// or User with PasswordFile.
	CredsFile    string `yaml:"creds_file"`
	NKeyFile     string `yaml:"nkey_file"`
	User         string `yaml:"user"`
	PasswordFile string `yaml:"password_file"`
	// CAFile is the PEM CA that signed the servers' certificates ("": the
	// system's roots); CertFile and KeyFile are this node's client
	// certificate for servers with tls { verify: true }. Both or neither.
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// WeCom is the long-connection endpoint and its timings.
type WeCom struct {
	// URL: wss://openws.work.weixin.qq.com in production. Empty with no
	// bots configured means demo mode (an in-process simulator).
	URL               string        `yaml:"url"`
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	AckTimeout        time.Duration `yaml:"ack_timeout"`
	// MaxAckTimeouts in a row tear the connection down (a socket that is
	// open but not answering); the election loop makes a new one. 0: the
	// client's default (3).
	MaxAckTimeouts int `yaml:"max_ack_timeouts"`
	// CallbackQueue bounds callbacks read and not yet handed to the
	// inbound path; past it the connection is closed (never a message
	// dropped silently). 0: the client's default (1024).
	CallbackQueue int `yaml:"callback_queue"`
}

// Election timings; see package election for what each trades off.
type Election struct {
	TTL          time.Duration `yaml:"ttl"`
	SafetyMargin time.Duration `yaml:"safety_margin"`
	// PulseInterval is how often a leader writes its liveness pulse (one
	// etcd write of about 130 bytes per led bot). Default 1s, at least
	// 100ms.
	PulseInterval time.Duration `yaml:"pulse_interval"`
	// PulseTimeout is how long a standby sees no pulse move before it
	// deposes the leader (confirmed by a linearizable read): takeover
	// after a hang or a machine that is gone. Default 3s; at least twice
	// pulse_interval. 0 turns the pulse off on this node (it publishes
	// none, so it is never deposed, and deposes nobody; a crash without
	// restart then costs up to ttl).
	PulseTimeout time.Duration `yaml:"pulse_timeout"`
	// KickLimit kicks by a connection outside the cluster (another holder
	// of the bot's credentials) within KickWindow mark the bot
	// needs_human instead of reconnecting. Defaults 3 and 10m.
	KickLimit  int           `yaml:"kick_limit"`
	KickWindow time.Duration `yaml:"kick_window"`
	// Balance is the balancer (balance.go).
	Balance Balance `yaml:"balance"`
}

// Worker is this node's compute side.
type Worker struct {
	// Slots is how many tasks this node holds at once (running, or
	// waiting for an AI concurrency token). AI tasks are I/O-bound, so
	// slots cost memory, not CPU: about 44 KB of heap and stacks per
	// running task with the demo backend, up to twice that in RSS
	// (BenchmarkRunningTaskMemory in pkg/worker; a real backend adds its
	// HTTP stream's buffers). Default 0: derived at start from the
	// memory this process may use, capped by ai.max_concurrency
	// (DeriveSlots: half the memory at 256 KiB a slot, so 8,192 on a
	// 4 GiB machine; three such nodes with one leading hold 16,640
	// answers at once). Set it only to bound memory below that; to
	// respect a model provider's limit, set ai.max_concurrency. At most
	// MaxSlots, so that the sum over nodes stays below the queue's
	// TaskMaxRunning (65536).
	Slots int `yaml:"slots"`
	// LeaderSlots is Slots while this node holds a bot's connection: the
	// leader keeps CPU headroom for its connection and pusher. Default
	// 256 (never more than Slots). 0: the leader runs no answers (the
	// single entry stays light; other nodes compute, and a task the
	// leader would run itself while the queue is away waits in the
	// spool). LeaderSlotsAll, written "all": as many as Slots.
	LeaderSlots int `yaml:"leader_slots"`
	// Deadline bounds a task's execution from its first attempt: past it
	// the task is failed, its conversation freed and the user told.
	// Default 30m (three times the AI backends' default timeout).
	Deadline time.Duration `yaml:"deadline"`
	// OutputInterval is the least time between two writes of a running
	// answer to the progress bucket. Default 0: the pusher's progress gap
	// at push.budget and a tenth (a minute over the budget less the final
	// frame's reserve, and a tenth: 3.7 s at 20/min), about one write per
	// frame the pusher may send; a frame the send budget held back asks
	// the worker for its text first (pkg/pusher's flush.go). Every write
	// is replicated to each server and delivered to the watchers: the
	// largest JetStream cost of an answer (serve's outputInterval says
	// what was measured).
	OutputInterval time.Duration `yaml:"output_interval"`
}

// DefaultWorkerSlots is worker.slots when the machine's memory cannot be
// read (DeriveSlots); DefaultLeaderSlots is worker.leader_slots'
// default: the leader keeps CPU for its connection and pusher.
const (
	DefaultWorkerSlots = 1024
	DefaultLeaderSlots = 256
)

// MaxSlots bounds worker.slots and worker.leader_slots: eight nodes at
// the most stay below the task queue's TaskMaxRunning (65536), which
// every running task holds one of; past it slots sit idle while tasks
// wait.
const MaxSlots = 8192

// Defaults returns the configuration with nothing set.
func Defaults() Config {
	host, _ := os.Hostname()
	c := Config{
		NodeID:  host,
		Env:     "default",
		DataDir: "data",
		Listen:  "127.0.0.1:8391",
		Etcd:    Etcd{DialTimeout: 5 * time.Second, CompactRetention: time.Hour},
		WeCom:   WeCom{HeartbeatInterval: 30 * time.Second, AckTimeout: 5 * time.Second},
		Election: Election{TTL: 20 * time.Second, SafetyMargin: 5 * time.Second, PulseInterval: time.Second, PulseTimeout: 3 * time.Second,
			KickLimit: 3, KickWindow: 10 * time.Minute, Balance: balanceDefaults()},
		Backfill: Backfill{Overlap: time.Minute, MaxMessages: 500, Rate: 20, AuditEvery: time.Minute},
		Worker:   Worker{LeaderSlots: DefaultLeaderSlots, Deadline: 30 * time.Minute},
		AI: AI{Kind: AIKindDemo, MaxAnswerBytes: DefaultMaxAnswerBytes, FirstTokenTimeout: DefaultFirstTokenTimeout,
			Breaker: AIBreaker{Failures: DefaultBreakerFailures, Cooldown: DefaultBreakerCooldown}},
		Memory: Memory{Turns: 20, Bytes: 16 << 10, IdleExpiry: jetstream.DefaultContextTTL},
		Push: Push{Budget: 20, BudgetHourly: 900, StreamWindow: 6 * time.Minute, Heartbeat: 20 * time.Second,
			HeartbeatLine: "已进行 %d 分 %02d 秒，仍在处理中", QueuedLine: "排队中，已等待 %d 分 %02d 秒，马上轮到你", TruncatedNote: "（回答较长，完整内容稍后单独发送）",
			HandoverNote: "（服务切换中，完整回答稍后单独发送）"},
		NATS: NATS{Replicas: 1, Prefix: jetstream.DefaultPrefix, PingInterval: 5 * time.Second, MaxClockSkew: 5 * time.Second, JetStreamFailover: DefaultJetStreamFailover},
	}
	c.Health, c.Recovery = healthDefaults()
	c.Alert = alertDefaults()
	c.Spool = spoolDefaults()
	c.Media = mediaDefaults()
	c.Log = logDefaults()
	c.Push.ReplayExpiry = 24 * time.Hour
	return c
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
			if !ok && slices.Contains(settingsSections, strings.Split(key, ".")[0]) {
				// A key of the bot sections that has no flag: the same
				// keys a bot's entry takes (BotSettings), by field.
				if err := c.setByTag(key, v); err != nil {
					return fmt.Errorf("config %s: %w", path, err)
				}
				continue
			}
			if !ok {
				return fmt.Errorf("config %s: unknown key %s: %s", path, key, didYouMean(key))
			}
			if items, ok := v.([]any); ok && k.list != nil {
				argv := make([]string, len(items))
				for i, it := range items {
					argv[i] = scalar(it)
				}
				k.list(c, argv)
				continue
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
		return errors.New("config key bots: want a list of {id, secret | secret_file, owner, ai, access, memory, limits}")
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
			case "owner":
				b.Owner = scalar(v)
			case "ai", "access", "memory", "limits": // checked by Validate, key by key
				sub, ok := v.(map[string]any)
				if !ok && v != nil {
					return fmt.Errorf("config key bots[%d].%s: want a mapping of the top-level %s section's keys", i, k, k)
				}
				if b.Settings == nil {
					b.Settings = map[string]any{}
				}
				b.Settings[k] = sub
			default:
				return fmt.Errorf("config key bots[%d].%s: unknown (want id, secret, secret_file, owner, ai, access, memory, limits)", i, k)
			}
		}
		c.Bots = append(c.Bots, b)
	}
	return nil
}

// unjoin splits an errors.Join into its errors (nil: none).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
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

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Resolve reads secret files and environment secrets into Bots, and
// derives worker.slots from this machine when it is 0 (DeriveSlots).
func (c *Config) Resolve(environ []string) error {
	c.resolveSlots(MachineMemory())
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
	c.Etcd.validate(bad)
	if c.NATS.URL != "" {
		// A cluster is several URLs, comma-separated (as nats.Connect takes them).
		for _, one := range strings.Split(c.NATS.URL, ",") {
			if u, err := url.Parse(strings.TrimSpace(one)); err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
				bad("nats.url", "%q: want nats://HOST:PORT or tls://HOST:PORT, comma-separated for a cluster", redact.URL(one))
			}
		}
	}
	c.validateSecurity(bad, &errs)
	if c.WeCom.URL != "" {
		if u, err := url.Parse(c.WeCom.URL); err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
			bad("wecom.url", "%q: want ws:// or wss:// (production: wss://openws.work.weixin.qq.com)", redact.URL(c.WeCom.URL))
		} else if u.User != nil {
			// The WebSocket dial refuses it ("malformed ws or wss URL")
			// only when the node connects: say so at start.
			bad("wecom.url", "%q carries credentials (user:password@): WeCom takes none in the URL, a bot authenticates with bots[].secret; remove them", redact.URL(c.WeCom.URL))
		}
	}
	if c.WeCom.HeartbeatInterval <= 0 {
		bad("wecom.heartbeat_interval", "must be positive, got %s", c.WeCom.HeartbeatInterval)
	}
	if c.WeCom.MaxAckTimeouts < 0 {
		bad("wecom.max_ack_timeouts", "must be 0 (default) or more, got %d", c.WeCom.MaxAckTimeouts)
	}
	if c.WeCom.CallbackQueue < 0 {
		bad("wecom.callback_queue", "must be 0 (default) or more, got %d", c.WeCom.CallbackQueue)
	}
	if c.WeCom.AckTimeout <= 0 {
		bad("wecom.ack_timeout", "must be positive, got %s", c.WeCom.AckTimeout)
	}
	if c.Election.PulseTimeout != 0 {
		if c.Election.PulseInterval < 100*time.Millisecond {
			bad("election.pulse_interval", "%s: want at least 100ms (each pulse is an etcd write per led bot)", c.Election.PulseInterval)
		} else if c.Election.PulseTimeout < 2*c.Election.PulseInterval {
			bad("election.pulse_timeout", "%s: want 0 (off) or at least twice election.pulse_interval (%s), or one late pulse deposes the leader", c.Election.PulseTimeout, c.Election.PulseInterval)
		}
	}
	c.validateElection(bad)
	if c.Worker.Slots < 0 || c.Worker.Slots > MaxSlots {
		bad("worker.slots", "%d: want 0 (derived from the machine's memory and ai.max_concurrency) to %d (the task queue's TaskMaxRunning, 65536, must exceed the sum over nodes)", c.Worker.Slots, MaxSlots)
	}
	if c.Worker.Deadline <= 0 {
		bad("worker.deadline", "must be positive, got %s", c.Worker.Deadline)
	}
	if c.Worker.OutputInterval != 0 && (c.Worker.OutputInterval < 100*time.Millisecond || c.Worker.OutputInterval > time.Minute) {
		bad("worker.output_interval", "%s: want 0 (the pusher's progress gap at push.budget and a tenth) or 100ms to 1m", c.Worker.OutputInterval)
	}
	if (c.Worker.LeaderSlots < 0 && c.Worker.LeaderSlots != LeaderSlotsAll) || c.Worker.LeaderSlots > MaxSlots {
		bad("worker.leader_slots", "%d: want 0 (the leader runs no answers) to %d, or all (as many as worker.slots)", c.Worker.LeaderSlots, MaxSlots)
	}
	if c.Push.Budget < 1 || c.Push.Budget > 30 {
		bad("push.budget", "%d frames/min: want 1 to 30 (WeCom allows about 30 per conversation; keep a margin)", c.Push.Budget)
	}
	if c.Push.BudgetHourly < 1 || c.Push.BudgetHourly > 1000 {
		bad("push.budget_hourly", "%d frames/h: want 1 to 1000 (WeCom allows 1,000 per conversation an hour; keep a margin)", c.Push.BudgetHourly)
	}
	if c.Push.StreamWindow < time.Minute {
		bad("push.stream_window", "%s: want at least 1m (WeCom's is 6m)", c.Push.StreamWindow)
	}
	if c.Push.Heartbeat <= 0 {
		bad("push.heartbeat", "must be positive, got %s", c.Push.Heartbeat)
	}
	if strings.Count(c.Push.QueuedLine, "%") != 2 || !strings.Contains(c.Push.QueuedLine, "d") {
		bad("push.queued_line", "%q: want a line with two integer verbs for minutes and seconds, e.g. \"排队中，已等待 %%d 分 %%02d 秒\"", c.Push.QueuedLine)
	}
	if strings.Count(c.Push.HeartbeatLine, "%") != 2 || !strings.Contains(c.Push.HeartbeatLine, "d") {
		bad("push.heartbeat_line", "%q: want a line with two integer verbs for minutes and seconds, e.g. \"已进行 %%d 分 %%02d 秒，仍在处理中\"", c.Push.HeartbeatLine)
	}
	if c.NATS.PingInterval < time.Second || c.NATS.PingInterval > 10*time.Minute {
		bad("nats.ping_interval", "%s: want 1s to 10m (a frozen NATS server is noticed after about 3 of them)", c.NATS.PingInterval)
	}
	c.validateNATSHealth(bad)
	if c.NATS.Replicas != 1 && c.NATS.Replicas != 3 && c.NATS.Replicas != 5 {
		bad("nats.replicas", "%d: want 1 (single server), 3 or 5 (cluster)", c.NATS.Replicas)
	}
	if c.Backfill.HistoryURL != "" {
		if u, err := url.Parse(c.Backfill.HistoryURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("backfill.history_url", "%q: want http://HOST:PORT of the WeCom simulator's control API", redact.URL(c.Backfill.HistoryURL))
		}
	}
	if c.Backfill.Overlap <= 0 {
		bad("backfill.overlap", "must be positive, got %s", c.Backfill.Overlap)
	}
	if c.Backfill.MaxMessages <= 0 {
		bad("backfill.max_messages", "must be positive, got %d", c.Backfill.MaxMessages)
	}
	if c.Dispatch.FixedWorker != "" {
		if u, err := url.Parse(c.Dispatch.FixedWorker); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("dispatch.fixed_worker", "%q: want http://HOST:PORT of a node's API", redact.URL(c.Dispatch.FixedWorker))
		}
	}
	// The top level's sections, then every bot's (the file's: its
	// etcd override is checked when it is set, and again by each node).
	// Each error names its key (ai.kind, bots[1].ai.openai.model, …).
	errs = append(errs, unjoin(c.TopSettings().Validate())...)
	for i, b := range c.Bots {
		s, err := c.BotSettings(b.ID)
		errs = append(errs, unjoin(err)...)
		if b.Settings != nil {
			errs = append(errs, unjoin(rekey(s.Validate(), fmt.Sprintf("bots[%d].", i)))...)
		}
	}
	c.validateHealth(bad)
	c.validateAlert(bad)
	c.validateSpool(bad)
	c.validateMedia(bad)
	c.validateLog(bad)
	seen := map[string]bool{}
	for i, b := range c.Bots {
		key := fmt.Sprintf("bots[%d]", i)
		switch {
		case !idRE.MatchString(b.ID):
			bad(key+".id", "%q: want 1-128 letters, digits, '_', '.', '-'", b.ID)
		case seen[b.ID]:
			bad(key+".id", "bot %s is configured twice", b.ID)
		case b.Secret == "":
			bad(key+".secret", "bot %s has no secret: set secret_file or $%s (--bot %s:SECRET puts it in argv: tests only)", b.ID, BotSecretEnv(b.ID), b.ID)
		}
		seen[b.ID] = true
	}
	return errors.Join(errs...)
}
