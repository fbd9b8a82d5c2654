package config

import (
	"strings"
	"testing"
	"time"
)

// media.max_store_bytes has a bounded default, is read from the file and
// the environment, and a value that would leave the store unbounded or
// too small for the largest file is refused naming the key.
func TestMediaMaxStoreBytes(t *testing.T) {
	if d := Defaults(); d.Media.MaxStoreBytes != 4<<30 {
		t.Fatalf("default media.max_store_bytes = %d, want 4 GiB", d.Media.MaxStoreBytes)
	}
	p := writeFile(t, `
media:
  max_store_bytes: 1073741824
`)
	cfg, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Media.MaxStoreBytes != 1<<30 {
		t.Fatalf("read %d from the file", cfg.Media.MaxStoreBytes)
	}
	cfg, err = Load(p, []string{"BOTCTL_MEDIA_MAX_STORE_BYTES=2147483648"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Media.MaxStoreBytes != 2<<30 {
		t.Fatalf("read %d from the environment", cfg.Media.MaxStoreBytes)
	}
	if _, err := Load(writeFile(t, "media:\n  max_store_bytes: lots\n"), nil); err == nil || !strings.Contains(err.Error(), "media.max_store_bytes") {
		t.Fatalf("a word as media.max_store_bytes: %v, want an error naming the key", err)
	}
	if d := Defaults(); d.Media.ReserveBytes != 1<<30 {
		t.Fatalf("default media.reserve_bytes = %d, want 1 GiB", d.Media.ReserveBytes)
	}
	if cfg, err := Load(p, []string{"BOTCTL_MEDIA_RESERVE_BYTES=0"}); err != nil || cfg.Media.ReserveBytes != 0 {
		t.Fatalf("media.reserve_bytes 0 from the environment: %d, %v", cfg.Media.ReserveBytes, err)
	}
	bad := Defaults()
	bad.Bots = []Bot{{ID: "b1", Secret: "s"}}
	bad.Media.ReserveBytes = -1
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "config key media.reserve_bytes") {
		t.Errorf("media.reserve_bytes -1: %v, want an error naming the key", err)
	}
	for _, n := range []int64{0, -1, DefaultMediaMaxBytes - 1} {
		cfg := Defaults()
		cfg.Bots = []Bot{{ID: "b1", Secret: "s"}}
		cfg.Media.MaxStoreBytes = n
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "config key media.max_store_bytes") {
			t.Errorf("media.max_store_bytes %d: %v, want an error naming the key", n, err)
		}
	}
}

// limits.user.bytes_per_day and limits.bot.bytes_per_day are read from
// the file and a bot's settings, and a negative one is refused naming
// its key.
func TestBytesPerDayLimitKeys(t *testing.T) {
	p := writeFile(t, `
limits:
  user: {bytes_per_day: 50000000}
bots:
  - id: b1
    secret: s
    limits:
      bot: {bytes_per_day: 900000000}
`)
	cfg, err := Load(p, []string{"BOTCTL_LIMITS_BOT_BYTES_PER_DAY=700000000"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Limits.User.BytesPerDay != 50000000 || cfg.Limits.Bot.BytesPerDay != 700000000 {
		t.Fatalf("read limits %+v", cfg.Limits)
	}
	s, err := cfg.BotSettings("b1")
	if err != nil {
		t.Fatal(err)
	}
	if s.Limits.User.BytesPerDay != 50000000 || s.Limits.Bot.BytesPerDay != 900000000 {
		t.Fatalf("b1's limits %+v", s.Limits)
	}
	for key, set := range map[string]func(*Config){
		"limits.user.bytes_per_day": func(c *Config) { c.Limits.User.BytesPerDay = -1 },
		"limits.bot.bytes_per_day":  func(c *Config) { c.Limits.Bot.BytesPerDay = -1 },
	} {
		cfg := Defaults()
		cfg.Bots = []Bot{{ID: "b1", Secret: "s"}}
		set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "config key "+key) {
			t.Errorf("%s -1: %v, want an error naming the key", key, err)
		}
	}
}

// media.message_timeout and media.parallel have their defaults, are read
// from the file and the environment, and a value out of range is refused
// naming the key.
func TestMediaMessageTimeoutAndParallel(t *testing.T) {
	if d := Defaults(); d.Media.MessageTimeout != 2*time.Minute || d.Media.Parallel != 8 {
		t.Fatalf("defaults %s, %d: want 2m and 8", d.Media.MessageTimeout, d.Media.Parallel)
	}
	p := writeFile(t, "media:\n  message_timeout: 90s\n  parallel: 4\nbots:\n  - {id: b1, secret: s}\n")
	cfg, err := Load(p, []string{"BOTCTL_MEDIA_PARALLEL=16"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Media.MessageTimeout != 90*time.Second || cfg.Media.Parallel != 16 {
		t.Fatalf("read %s, %d", cfg.Media.MessageTimeout, cfg.Media.Parallel)
	}
	if _, err := Load(writeFile(t, "media:\n  parallel: many\n"), nil); err == nil || !strings.Contains(err.Error(), "media.parallel") {
		t.Fatalf("a word as media.parallel: %v, want an error naming the key", err)
	}
	for _, tc := range []struct {
		key string
		set func(*Config)
	}{
		{"media.message_timeout", func(c *Config) { c.Media.MessageTimeout = 5 * time.Minute }},
		{"media.message_timeout", func(c *Config) { c.Media.MessageTimeout = 0 }},
		{"media.parallel", func(c *Config) { c.Media.Parallel = 0 }},
		{"media.parallel", func(c *Config) { c.Media.Parallel = 1000 }},
	} {
		cfg := Defaults()
		cfg.Bots = []Bot{{ID: "b1", Secret: "s"}}
		tc.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "config key "+tc.key) {
			t.Errorf("%+v: %v, want an error naming %s", cfg.Media, err, tc.key)
		}
	}
}

// The effective media hosts: as set; "*" alone is any public host; unset,
// WeCom's media host against WeCom's own endpoint, and any public host
// against another (a private deployment, the simulator).
func TestMediaHostsDefaultToWeComsAgainstWeCom(t *testing.T) {
	for _, tc := range []struct {
		url   string
		hosts []string
		want  string
	}{
		{"wss://openws.work.weixin.qq.com", nil, WeComMediaHost},
		{"wss://OpenWS.work.weixin.qq.com/", nil, WeComMediaHost},
		{"wss://openws.work.weixin.qq.com", []string{"*"}, ""},
		{"wss://openws.work.weixin.qq.com", []string{"a.example.com", ".qpic.cn"}, "a.example.com,.qpic.cn"},
		{"wss://wecom.corp.example/ws", nil, ""},
		{"ws://127.0.0.1:8390/", nil, ""},
		{"", nil, ""},
	} {
		c := Config{WeCom: WeCom{URL: tc.url}, Media: Media{AllowedHosts: tc.hosts}}
		if got := strings.Join(c.MediaHosts(), ","); got != tc.want {
			t.Errorf("wecom.url %q, allowed_hosts %q: %q, want %q", tc.url, tc.hosts, got, tc.want)
		}
	}
}
