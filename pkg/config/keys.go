package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Key is one configuration key: its name, its environment variable, and how
// a string sets it. Flags use the same table (package cmd/botctl).
type Key struct {
	Name  string // dotted YAML path, e.g. "etcd.endpoints"
	Flag  string // botctl serve's flag, without dashes
	Usage string
	// set parses a string (env, flag or YAML scalar) into the key's field.
	set func(*Config, string) error
	// list, if set, takes a YAML list as it is (argv: items may hold spaces).
	list func(*Config, []string)
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

func integer(f func(*Config) *int) func(*Config, string) error {
	return func(c *Config, s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		*f(c) = n
		return nil
	}
}

// leaderSlots reads worker.leader_slots: a count (0: none) or "all".
func leaderSlots(c *Config, s string) error {
	if s == "all" {
		c.Worker.LeaderSlots = LeaderSlotsAll
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("%q: want a count of slots (0: the leader runs no answers) or all (as many as worker.slots)", s)
	}
	c.Worker.LeaderSlots = n
	return nil
}

func int64Key(f func(*Config) *int64) func(*Config, string) error {
	return func(c *Config, s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		*f(c) = n
		return nil
	}
}

// Keys lists every key settable from the environment and flags.
var Keys = []Key{
	{Name: "node_id", Flag: "node-id", Usage: "this node's unique id", set: str(func(c *Config) *string { return &c.NodeID })},
	{Name: "env", Flag: "env", Usage: "this node's environment (the per-bot env gate)", set: str(func(c *Config) *string { return &c.Env })},
	{Name: "data_dir", Flag: "data-dir", Usage: "data directory (embedded etcd/NATS, spool)", set: str(func(c *Config) *string { return &c.DataDir })},
	{Name: "listen", Flag: "listen", Usage: "node HTTP API address", set: str(func(c *Config) *string { return &c.Listen })},
	{Name: "etcd.endpoints", Flag: "etcd", Usage: "etcd endpoints, comma-separated (none: embedded)", set: func(c *Config, s string) error {
		c.Etcd.Endpoints = splitList(s)
		return nil
	}},
	{Name: "etcd.dial_timeout", Flag: "etcd-dial-timeout", Usage: "etcd dial timeout", set: dur(func(c *Config) *time.Duration { return &c.Etcd.DialTimeout })},
	{Name: "etcd.compact_retention", Flag: "etcd-compact-retention", Usage: "history kept when nodes compact an external etcd themselves (0: they do not)", set: dur(func(c *Config) *time.Duration { return &c.Etcd.CompactRetention })},
	{Name: "etcd.ca_file", Flag: "etcd-ca-file", Usage: "CA (PEM) of the etcd members' certificates", set: str(func(c *Config) *string { return &c.Etcd.CAFile })},
	{Name: "etcd.cert_file", Flag: "etcd-cert-file", Usage: "client certificate (PEM) for etcd", set: str(func(c *Config) *string { return &c.Etcd.CertFile })},
	{Name: "etcd.key_file", Flag: "etcd-key-file", Usage: "client key (PEM) for etcd", set: str(func(c *Config) *string { return &c.Etcd.KeyFile })},
	{Name: "etcd.username", Flag: "etcd-username", Usage: "etcd user (with etcd.password_file)", set: str(func(c *Config) *string { return &c.Etcd.Username })},
	{Name: "etcd.password_file", Flag: "etcd-password-file", Usage: "file holding the etcd user's password", set: str(func(c *Config) *string { return &c.Etcd.PasswordFile })},
	{Name: "nats.url", Flag: "nats", Usage: "NATS URL (none: embedded)", set: str(func(c *Config) *string { return &c.NATS.URL })},
	{Name: "nats.ping_interval", Flag: "nats-ping-interval", Usage: "how often a quiet NATS connection is pinged; two unanswered pings and the node reconnects", set: dur(func(c *Config) *time.Duration { return &c.NATS.PingInterval })},
	{Name: "nats.max_clock_skew", Flag: "nats-max-clock-skew", Usage: "how far this node's clock may be from JetStream's before it leads nothing and runs no task (0: no check)", set: dur(func(c *Config) *time.Duration { return &c.NATS.MaxClockSkew })},
	{Name: "nats.prefix", Flag: "nats-prefix", Usage: "stream and bucket prefix: one per environment sharing a NATS account", set: str(func(c *Config) *string { return &c.NATS.Prefix })},
	{Name: "nats.creds_file", Flag: "nats-creds-file", Usage: "NATS user credentials file (JWT and seed)", set: str(func(c *Config) *string { return &c.NATS.CredsFile })},
	{Name: "nats.nkey_file", Flag: "nats-nkey-file", Usage: "NATS user nkey seed file", set: str(func(c *Config) *string { return &c.NATS.NKeyFile })},
	{Name: "nats.user", Flag: "nats-user", Usage: "NATS user (with nats.password_file)", set: str(func(c *Config) *string { return &c.NATS.User })},
	{Name: "nats.password_file", Flag: "nats-password-file", Usage: "file holding the NATS user's password", set: str(func(c *Config) *string { return &c.NATS.PasswordFile })},
	{Name: "nats.ca_file", Flag: "nats-ca-file", Usage: "CA (PEM) of the NATS servers' certificates", set: str(func(c *Config) *string { return &c.NATS.CAFile })},
	{Name: "nats.cert_file", Flag: "nats-cert-file", Usage: "client certificate (PEM) for NATS", set: str(func(c *Config) *string { return &c.NATS.CertFile })},
	{Name: "nats.key_file", Flag: "nats-key-file", Usage: "client key (PEM) for NATS", set: str(func(c *Config) *string { return &c.NATS.KeyFile })},
	{Name: "api.token_file", Flag: "api-token-file", Usage: "file holding the node API's bearer token (required off loopback and with a fixed worker; unset: DATA_DIR/api.token, generated)", set: str(func(c *Config) *string { return &c.API.TokenFile })},
	{Name: "api.cert_file", Flag: "api-cert-file", Usage: "serve the node API over HTTPS with this certificate (PEM)", set: str(func(c *Config) *string { return &c.API.CertFile })},
	{Name: "api.key_file", Flag: "api-key-file", Usage: "the node API certificate's key (PEM)", set: str(func(c *Config) *string { return &c.API.KeyFile })},
	{Name: "api.ca_file", Flag: "api-ca-file", Usage: "CA (PEM) of the other nodes' API certificates (tier 2, botctl status)", set: str(func(c *Config) *string { return &c.API.CAFile })},
	{Name: "api.forward_peers", Flag: "api-forward-peers", Usage: "hosts or host:port of the other nodes' APIs a standby may forward a send to with the node's token, when api.ca_file is not set (comma-separated; empty: only with api.ca_file, or to this machine)", set: func(c *Config, s string) error {
		c.API.ForwardPeers = splitList(s)
		return nil
	}},
	{Name: "api.agent_tokens_file", Flag: "api-agent-tokens-file", Usage: "file of per-agent tokens for the WeCom MCP gateway, one \"NAME TOKEN\" a line (unset: the node API token only)", set: str(func(c *Config) *string { return &c.API.AgentTokensFile })},
	{Name: "api.pprof", Flag: "api-pprof", Usage: "serve Go's profiler (net/http/pprof) under /debug/pprof/ on the node API, behind its token (true or false)", set: boolean(func(c *Config) *bool { return &c.API.Pprof })},
	{Name: "secrets.key_file", Flag: "secrets-key-file", Usage: "the cluster key (64 hex characters, openssl rand -hex 32; the same file on every node) under which the bot registry's secrets are sealed (unset: the registry's bots are not served)", set: str(func(c *Config) *string { return &c.Secrets.KeyFile })},
	{Name: "wecom.url", Flag: "wecom-url", Usage: "WeCom WebSocket URL", set: str(func(c *Config) *string { return &c.WeCom.URL })},
	{Name: "wecom.heartbeat_interval", Flag: "wecom-heartbeat", Usage: "WeCom ping period", set: dur(func(c *Config) *time.Duration { return &c.WeCom.HeartbeatInterval })},
	{Name: "wecom.max_ack_timeouts", Flag: "wecom-max-ack-timeouts", Usage: "ack timeouts in a row that tear the connection down (0: 3)", set: integer(func(c *Config) *int { return &c.WeCom.MaxAckTimeouts })},
	{Name: "wecom.callback_queue", Flag: "wecom-callback-queue", Usage: "callbacks read and not yet handled before the connection is closed (0: 1024)", set: integer(func(c *Config) *int { return &c.WeCom.CallbackQueue })},
	{Name: "wecom.ack_timeout", Flag: "wecom-ack-timeout", Usage: "WeCom ack timeout", set: dur(func(c *Config) *time.Duration { return &c.WeCom.AckTimeout })},
	{Name: "election.ttl", Flag: "election-ttl", Usage: "election session TTL", set: dur(func(c *Config) *time.Duration { return &c.Election.TTL })},
	{Name: "election.safety_margin", Flag: "election-safety-margin", Usage: "leadership is dropped this long before the lease can expire", set: dur(func(c *Config) *time.Duration { return &c.Election.SafetyMargin })},
	{Name: "election.pulse_interval", Flag: "election-pulse-interval", Usage: "how often a leader writes its liveness pulse", set: dur(func(c *Config) *time.Duration { return &c.Election.PulseInterval })},
	{Name: "election.pulse_timeout", Flag: "election-pulse-timeout", Usage: "a standby deposes a leader whose pulse stood still this long (0: pulse off)", set: dur(func(c *Config) *time.Duration { return &c.Election.PulseTimeout })},
	{Name: "election.kick_limit", Flag: "election-kick-limit", Usage: "kicks by a connection outside the cluster, within election.kick_window, that mark the bot needs_human", set: integer(func(c *Config) *int { return &c.Election.KickLimit })},
	{Name: "election.kick_window", Flag: "election-kick-window", Usage: "the window election.kick_limit counts kicks in", set: dur(func(c *Config) *time.Duration { return &c.Election.KickWindow })},
	{Name: "worker.slots", Flag: "worker-slots", Usage: "concurrent tasks on this node (0: derived from the memory this process may use, 256 KiB a slot for half of it, at most 8192 and no more than ai.max_concurrency)", set: integer(func(c *Config) *int { return &c.Worker.Slots })},
	{Name: "worker.leader_slots", Flag: "worker-leader-slots", Usage: "concurrent tasks while this node leads a bot: 0 runs no answers on the leader, all as many as worker.slots", set: leaderSlots},
	{Name: "worker.output_interval", Flag: "worker-output-interval", Usage: "least time between two output writes of a running answer (0: the pusher's progress gap at push.budget and a tenth, 3.7s at 20/min)", set: dur(func(c *Config) *time.Duration { return &c.Worker.OutputInterval })},
	{Name: "worker.deadline", Flag: "task-deadline", Usage: "a task not answered this long after its first attempt is failed and the user told", set: dur(func(c *Config) *time.Duration { return &c.Worker.Deadline })},
	{Name: "ai.kind", Flag: "ai", Usage: "AI backend: " + aiKindList("%s", ", ", " or "), set: str(func(c *Config) *string { return &c.AI.Kind })},
	{Name: "ai.max_concurrency", Flag: "ai-max-concurrency", Usage: "answers asked of the AI backend at once on this node (0: no limit beyond worker.slots; set, it also caps worker.slots' derived default)", set: integer(func(c *Config) *int { return &c.AI.MaxConcurrency })},
	{Name: "ai.max_answer_bytes", Flag: "ai-max-answer-bytes", Usage: "longest answer stored, in bytes as stored (JSON-escaped); a longer one is cut there with a note, and delivered once", set: integer(func(c *Config) *int { return &c.AI.MaxAnswerBytes })},
	{Name: "ai.show_thinking", Flag: "ai-show-thinking", Usage: "what the user reads of the backend's thinking, folded before the answer: true (reasoning and tool steps), tools (tool steps only) or false (none)", set: str(func(c *Config) *string { return &c.AI.ShowThinking })},
	{Name: "ai.tools", Flag: "ai-tools", Usage: "the WeCom MCP tools the bot's agents may call through the node's gateway: BIZ_TYPE or BIZ_TYPE/TOOL, comma-separated (a YAML list in the file; empty: none)", set: func(c *Config, s string) error {
		c.AI.Tools = splitList(s)
		return nil
	}, list: func(c *Config, items []string) { c.AI.Tools = items }},
	{Name: "ai.first_token_timeout", Flag: "ai-first-token-timeout", Usage: "a backend that has said nothing this long has failed: the next of ai.fallback is asked (0: off)", set: dur(func(c *Config) *time.Duration { return &c.AI.FirstTokenTimeout })},
	{Name: "ai.breaker.failures", Flag: "ai-breaker-failures", Usage: "failures in a row that open a backend's circuit breaker: it is skipped for ai.breaker.cooldown (0: no breaker)", set: integer(func(c *Config) *int { return &c.AI.Breaker.Failures })},
	{Name: "ai.breaker.cooldown", Flag: "ai-breaker-cooldown", Usage: "how long an open circuit breaker skips its backend before one answer probes it", set: dur(func(c *Config) *time.Duration { return &c.AI.Breaker.Cooldown })},
	{Name: "ai.demo.answer_time", Flag: "demo-answer-time", Usage: "how long a demo answer streams", set: dur(func(c *Config) *time.Duration { return &c.AI.Demo.AnswerTime })},
	{Name: "ai.demo.answer_time_max", Flag: "demo-answer-time-max", Usage: "spread demo answers over [answer_time, this] (0: all take answer_time)", set: dur(func(c *Config) *time.Duration { return &c.AI.Demo.AnswerTimeMax })},
	{Name: "ai.demo.answer_bytes", Flag: "demo-answer-bytes", Usage: "make demo answers at least this long", set: integer(func(c *Config) *int { return &c.AI.Demo.AnswerBytes })},
	{Name: "ai.exec.command", Flag: "ai-exec", Usage: "exec backend command (space-separated argv; a YAML list in the file)", set: func(c *Config, s string) error {
		c.AI.Exec.Command = strings.Fields(s)
		return nil
	}, list: func(c *Config, argv []string) { c.AI.Exec.Command = argv }},
	{Name: "ai.exec.env", Flag: "ai-exec-env", Usage: "the exec backend's whole environment besides PATH, HOME and locale: NAME (passed from the node's) or NAME=value, comma-separated (a YAML list in the file)", set: func(c *Config, s string) error {
		c.AI.Exec.Env = splitList(s)
		return nil
	}, list: func(c *Config, items []string) { c.AI.Exec.Env = items }},
	{Name: "ai.openai.base_url", Flag: "openai-base-url", Usage: "OpenAI-compatible API base URL", set: str(func(c *Config) *string { return &c.AI.OpenAI.BaseURL })},
	{Name: "ai.openai.model", Flag: "openai-model", Usage: "model name", set: str(func(c *Config) *string { return &c.AI.OpenAI.Model })},
	{Name: "ai.openai.api_key_env", Flag: "openai-api-key-env", Usage: "environment variable holding the API key", set: str(func(c *Config) *string { return &c.AI.OpenAI.APIKeyEnv })},
	{Name: "ai.openai.system_prompt", Flag: "system-prompt", Usage: "system prompt", set: str(func(c *Config) *string { return &c.AI.OpenAI.SystemPrompt })},
	{Name: "ai.openai.timeout", Flag: "openai-timeout", Usage: "one openai answer, request to last chunk", set: dur(func(c *Config) *time.Duration { return &c.AI.OpenAI.Timeout })},
	{Name: "ai.openai.max_tokens", Flag: "openai-max-tokens", Usage: "max_tokens sent with each request (0: not sent)", set: integer(func(c *Config) *int { return &c.AI.OpenAI.MaxTokens })},
	{Name: "ai.openai.temperature", Flag: "openai-temperature", Usage: "temperature sent with each request, 0 to 2 (0: not sent)", set: float(func(c *Config) *float64 { return &c.AI.OpenAI.Temperature })},
	{Name: "ai.openai.no_usage", Flag: "openai-no-usage", Usage: "do not ask for the answer's token usage (stream_options), for a server that refuses it", set: boolean(func(c *Config) *bool { return &c.AI.OpenAI.NoUsage })},
	{Name: "ai.dify.base_url", Flag: "dify-base-url", Usage: "Dify API base URL (the part before /chat-messages)", set: str(func(c *Config) *string { return &c.AI.Dify.BaseURL })},
	{Name: "ai.dify.api_key_file", Flag: "dify-api-key-file", Usage: "file holding the Dify app's API key", set: str(func(c *Config) *string { return &c.AI.Dify.APIKeyFile })},
	{Name: "ai.dify.timeout", Flag: "dify-timeout", Usage: "one dify answer, request to message_end", set: dur(func(c *Config) *time.Duration { return &c.AI.Dify.Timeout })},
	{Name: "ai.http.url", Flag: "ai-http-url", Usage: "the http backend's endpoint (an n8n webhook, your agent)", set: str(func(c *Config) *string { return &c.AI.HTTP.URL })},
	{Name: "ai.http.token_file", Flag: "ai-http-token-file", Usage: "file holding the bearer token sent to ai.http.url (unset: none)", set: str(func(c *Config) *string { return &c.AI.HTTP.TokenFile })},
	{Name: "ai.http.timeout", Flag: "ai-http-timeout", Usage: "one http answer, request to the end of the answer", set: dur(func(c *Config) *time.Duration { return &c.AI.HTTP.Timeout })},
	{Name: "backfill.history_url", Flag: "backfill-history-url", Usage: "history source for the gap backfill: the WeCom simulator's base URL (\"\": WeCom's own message history, the bot's msg MCP server)", set: str(func(c *Config) *string { return &c.Backfill.HistoryURL })},
	{Name: "backfill.overlap", Flag: "backfill-overlap", Usage: "how far before the inbound watermark a backfill pass reads", set: dur(func(c *Config) *time.Duration { return &c.Backfill.Overlap })},
	{Name: "backfill.max_messages", Flag: "backfill-max-messages", Usage: "missed messages one backfill pass answers at most", set: integer(func(c *Config) *int { return &c.Backfill.MaxMessages })},
	{Name: "spool.max_entries", Flag: "spool-max-entries", Usage: "tasks the local spool keeps while JetStream is away; past it a task is refused and its user told to try later", set: integer(func(c *Config) *int { return &c.Spool.MaxEntries })},
	{Name: "spool.max_bytes", Flag: "spool-max-bytes", Usage: "bytes the local spool keeps; past it a task is refused and its user told to try later", set: func(c *Config, s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		c.Spool.MaxBytes = n
		return nil
	}},
	{Name: "spool.expiry", Flag: "spool-expiry", Usage: "a task that waited in the spool longer is not run: its user is told it was not answered and to send it again", set: dur(func(c *Config) *time.Duration { return &c.Spool.Expiry })},
	{Name: "spool.late_after", Flag: "spool-late-after", Usage: "a task forwarded from the spool after waiting longer is answered with the late note", set: dur(func(c *Config) *time.Duration { return &c.Spool.LateAfter })},
	{Name: "dispatch.fixed_worker", Flag: "fixed-worker", Usage: "tier-2 worker API base URL", set: str(func(c *Config) *string { return &c.Dispatch.FixedWorker })},
	{Name: "access.allow_users", Flag: "allow-users", Usage: "only these user ids (comma-separated; empty: all)", set: func(c *Config, s string) error {
		c.Access.AllowUsers = splitList(s)
		return nil
	}},
	{Name: "access.allow_chats", Flag: "allow-chats", Usage: "only these group chat ids (comma-separated; empty: all)", set: func(c *Config, s string) error {
		c.Access.AllowChats = splitList(s)
		return nil
	}},
	{Name: "access.max_question_bytes", Flag: "max-question-bytes", Usage: "longest question accepted", set: integer(func(c *Config) *int { return &c.Access.MaxQuestionBytes })},
	{Name: "access.receipt_text", Flag: "receipt-text", Usage: "the receipt frame's text", set: str(func(c *Config) *string { return &c.Access.ReceiptText })},
	{Name: "access.welcome_text", Flag: "welcome-text", Usage: "answer to enter_chat (empty: none)", set: str(func(c *Config) *string { return &c.Access.WelcomeText })},
	{Name: "access.reported_version", Flag: "reported-version", Usage: "the version the bot reports when WeCom asks (enter_check_update); empty: botctl's version", set: str(func(c *Config) *string { return &c.Access.ReportedVersion })},
	{Name: "access.welcome_card", Flag: "welcome-card", Usage: "answer to enter_chat as a template card: its JSON object (empty: welcome_text)", set: str(func(c *Config) *string { return &c.Access.WelcomeCard })},
	{Name: "access.busy_text", Flag: "busy-text", Usage: "answer to a message sent while the conversation's previous one is being answered (empty: the default)", set: str(func(c *Config) *string { return &c.Access.BusyText })},
	{Name: "access.unsupported_text", Flag: "unsupported-text", Usage: "answer to a message of a type the bot does not take; %s is the type (empty: the default)", set: str(func(c *Config) *string { return &c.Access.UnsupportedText })},
	{Name: "access.late_note", Flag: "late-note", Usage: "note starting an answer pushed late, to a message missed while no node held the connection (empty: the default)", set: str(func(c *Config) *string { return &c.Access.LateNote })},
	{Name: "access.limit_text", Flag: "limit-text", Usage: "answer to a message over one of the bot's limits (empty: the default)", set: str(func(c *Config) *string { return &c.Access.LimitText })},
	{Name: "limits.user.messages_per_minute", Flag: "limit-user-messages-per-minute", Usage: "messages a user may send a bot in a minute (0: no limit)", set: int64Key(func(c *Config) *int64 { return &c.Limits.User.MessagesPerMinute })},
	{Name: "limits.user.messages_per_day", Flag: "limit-user-messages-per-day", Usage: "messages a user may send a bot in a UTC day (0: no limit)", set: int64Key(func(c *Config) *int64 { return &c.Limits.User.MessagesPerDay })},
	{Name: "limits.user.tokens_per_day", Flag: "limit-user-tokens-per-day", Usage: "tokens a user's answers may take in a UTC day, where the backend reports usage (0: no limit)", set: int64Key(func(c *Config) *int64 { return &c.Limits.User.TokensPerDay })},
	{Name: "limits.bot.messages_per_minute", Flag: "limit-bot-messages-per-minute", Usage: "messages a bot takes in a minute from all its users (0: no limit)", set: int64Key(func(c *Config) *int64 { return &c.Limits.Bot.MessagesPerMinute })},
	{Name: "limits.bot.messages_per_day", Flag: "limit-bot-messages-per-day", Usage: "messages a bot takes in a UTC day from all its users (0: no limit)", set: int64Key(func(c *Config) *int64 { return &c.Limits.Bot.MessagesPerDay })},
	{Name: "limits.user.bytes_per_day", Flag: "limit-user-bytes-per-day", Usage: "bytes of files a user may send a bot in a UTC day (0: no limit)", set: int64Key(func(c *Config) *int64 { return &c.Limits.User.BytesPerDay })},
	{Name: "limits.bot.bytes_per_day", Flag: "limit-bot-bytes-per-day", Usage: "bytes of files a bot takes in a UTC day from all its users (0: no limit)", set: int64Key(func(c *Config) *int64 { return &c.Limits.Bot.BytesPerDay })},
	{Name: "limits.bot.tokens_per_day", Flag: "limit-bot-tokens-per-day", Usage: "tokens a bot's answers may take in a UTC day, where the backend reports usage (0: no limit)", set: int64Key(func(c *Config) *int64 { return &c.Limits.Bot.TokensPerDay })},
	{Name: "memory.turns", Flag: "memory-turns", Usage: "messages of a conversation kept for multi-turn answers (0: none)", set: integer(func(c *Config) *int { return &c.Memory.Turns })},
	{Name: "memory.bytes", Flag: "memory-bytes", Usage: "bytes of a conversation's kept messages", set: integer(func(c *Config) *int { return &c.Memory.Bytes })},
	{Name: "memory.idle_expiry", Flag: "memory-idle-expiry", Usage: "a conversation idle this long starts afresh (at most 24h)", set: dur(func(c *Config) *time.Duration { return &c.Memory.IdleExpiry })},
	{Name: "push.budget", Flag: "push-budget", Usage: "frames per minute per conversation (under WeCom's 30)", set: integer(func(c *Config) *int { return &c.Push.Budget })},
	{Name: "push.budget_hourly", Flag: "push-budget-hourly", Usage: "frames per hour per conversation (under WeCom's 1,000)", set: integer(func(c *Config) *int { return &c.Push.BudgetHourly })},
	{Name: "push.stream_window", Flag: "stream-window", Usage: "WeCom's stream window", set: dur(func(c *Config) *time.Duration { return &c.Push.StreamWindow })},
	{Name: "push.queued_line", Flag: "push-queued-line", Usage: "status line while the task waits for a free worker (minutes, seconds)", set: str(func(c *Config) *string { return &c.Push.QueuedLine })},
	{Name: "push.heartbeat_line", Flag: "push-heartbeat-line", Usage: "status line after push.heartbeat without news (minutes, seconds)", set: str(func(c *Config) *string { return &c.Push.HeartbeatLine })},
	{Name: "push.truncated_note", Flag: "push-truncated-note", Usage: "note ending a stream closed before its window ends", set: str(func(c *Config) *string { return &c.Push.TruncatedNote })},
	{Name: "push.handover_note", Flag: "push-handover-note", Usage: "note ending a stream a stopping leader closes (the complete answer follows by push)", set: str(func(c *Config) *string { return &c.Push.HandoverNote })},
	{Name: "nats.replicas", Flag: "nats-replicas", Usage: "replicas of streams and buckets (1 embedded, 3 on a cluster)", set: integer(func(c *Config) *int { return &c.NATS.Replicas })},
	{Name: "push.heartbeat", Flag: "push-heartbeat", Usage: "status line after this long without news", set: dur(func(c *Config) *time.Duration { return &c.Push.Heartbeat })},
}
