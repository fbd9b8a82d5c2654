package config

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Media is what botctl does with the files users send (images, files,
// videos, the images of a mixed message, quoted ones): the leader
// downloads and decrypts each one when its message arrives (WeCom's URL
// works for about five minutes), bounded by these keys, and stores it in
// the media object store for the worker that runs the task.
type Media struct {
	// MaxBytes is the largest file accepted, in bytes; a larger one is not
	// downloaded (or stops being), and the user is told the limit.
	// Default 20 MB (20971520).
	MaxBytes int64 `yaml:"max_bytes"`
	// DownloadTimeout bounds one file's download; a slower one is given
	// up and the user told. Default 30s.
	DownloadTimeout time.Duration `yaml:"download_timeout"`
	// MessageTimeout bounds all of a message's files together, counted
	// from the message's arrival: the wait for a download slot, every
	// download and every store. Past it the files are given up and the
	// user told. Below the life of WeCom's media URLs (about five
	// minutes); a file's download ends at whichever of this and
	// download_timeout comes first. Default 2m.
	MessageTimeout time.Duration `yaml:"message_timeout"`
	// Parallel bounds the downloads of one node at once (each file is in
	// memory until stored: at most parallel × max_bytes). One
	// conversation takes at most a quarter of them (at least one), so a
	// conversation whose downloads stall leaves the rest to others.
	// Default 8.
	Parallel int `yaml:"parallel"`
	// TTL is how long the media object store keeps a file. It must exceed
	// worker.deadline: a task's files must outlive its run. Default 24h.
	TTL time.Duration `yaml:"ttl"`
	// MaxStoreBytes bounds the media object store, in bytes (its
	// stream's MaxBytes, with DiscardNew): past it a file is refused and
	// its user told storage is full, while text messages, the task queue
	// and every bucket go on. JetStream reserves the bound on each server
	// at start (a server that cannot hold it refuses, and botctl does not
	// start); what the other streams have is JetStream's storage
	// (max_file_store) less this. Default 4 GiB (4294967296); always
	// bounded.
	MaxStoreBytes int64 `yaml:"max_store_bytes"`
	// ReserveBytes is JetStream storage kept from the media store for the
	// task queue and the buckets: each server sets it aside beside
	// max_store_bytes, and one whose storage (max_file_store) cannot hold
	// both refuses them at start (botctl does not start, naming these
	// keys). 0: nothing set aside. Default 1 GiB (1073741824).
	ReserveBytes int64 `yaml:"reserve_bytes"`
	// AllowedHosts are the only hosts users' files are downloaded from,
	// redirects included: a name, or ".suffix" for any host under it; "*"
	// alone: any public host. Empty: WeComMediaHost against WeCom's own
	// endpoint (wecom.url on openws.work.weixin.qq.com), any public host
	// elsewhere (a private deployment's URL, the simulator). On a wss://
	// WeCom URL (not the simulator's ws://) downloads are https only, to
	// public addresses only (a host named here exactly may also be
	// link-local: a cloud's internal endpoint), and every file needs its
	// aeskey, whatever this says. MediaHosts is the effective list.
	AllowedHosts []string `yaml:"allowed_hosts"`
}

// WeComMediaHost is where WeCom's AI bot callbacks point users' files
// (images, files, mixed messages): the object storage bucket of WeCom's
// own example callback (developer.work.weixin.qq.com, document 100719) and
// of the callbacks seen since. WeCom does not promise it: a file refused
// for its host names the host and this key in the node's log.
const WeComMediaHost = "ww-aibot-img-1258476243.cos.ap-guangzhou.myqcloud.com"

// AnyMediaHost, alone in media.allowed_hosts, lets files come from any
// public host.
const AnyMediaHost = "*"

// weComHost is the host of WeCom's public long-connection endpoint.
const weComHost = "openws.work.weixin.qq.com"

// MediaHosts is the effective media.allowed_hosts: the list as set; empty,
// WeComMediaHost against WeCom's public endpoint; nil (any public host)
// for "*", or empty against another endpoint.
func (c Config) MediaHosts() []string {
	switch {
	case len(c.Media.AllowedHosts) == 1 && c.Media.AllowedHosts[0] == AnyMediaHost:
		return nil
	case len(c.Media.AllowedHosts) > 0:
		return c.Media.AllowedHosts
	}
	if u, err := url.Parse(c.WeCom.URL); err == nil && u.Scheme == "wss" && strings.EqualFold(u.Hostname(), weComHost) {
		return []string{WeComMediaHost}
	}
	return nil
}

// Defaults of Media.
const (
	DefaultMediaMaxBytes        = 20 << 20
	DefaultMediaDownloadTimeout = 30 * time.Second
	DefaultMediaMessageTimeout  = 2 * time.Minute
	DefaultMediaParallel        = 8
	DefaultMediaTTL             = 24 * time.Hour
	DefaultMediaMaxStoreBytes   = 4 << 30
	DefaultMediaReserveBytes    = 1 << 30
)

func mediaDefaults() Media {
	return Media{MaxBytes: DefaultMediaMaxBytes, DownloadTimeout: DefaultMediaDownloadTimeout,
		MessageTimeout: DefaultMediaMessageTimeout, Parallel: DefaultMediaParallel, TTL: DefaultMediaTTL, MaxStoreBytes: DefaultMediaMaxStoreBytes, ReserveBytes: DefaultMediaReserveBytes}
}

var mediaKeys = []Key{
	{Name: "media.max_bytes", Flag: "media-max-bytes", Usage: "largest file a user may send, in bytes (a larger one is refused with the limit)", set: func(c *Config, s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		c.Media.MaxBytes = n
		return nil
	}},
	{Name: "media.download_timeout", Flag: "media-download-timeout", Usage: "longest download of one file a user sent", set: dur(func(c *Config) *time.Duration { return &c.Media.DownloadTimeout })},
	{Name: "media.message_timeout", Flag: "media-message-timeout", Usage: "longest time all of a message's files may take, from its arrival (the wait for a slot included); 1s to 4m, below WeCom's 5-minute URL life", set: dur(func(c *Config) *time.Duration { return &c.Media.MessageTimeout })},
	{Name: "media.parallel", Flag: "media-parallel", Usage: "downloads of users' files one node runs at once (a conversation takes at most a quarter)", set: func(c *Config, s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		c.Media.Parallel = n
		return nil
	}},
	{Name: "media.max_store_bytes", Flag: "media-max-store-bytes", Usage: "bytes the media object store holds at most; past it a file is refused and its user told storage is full (text goes on)", set: func(c *Config, s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		c.Media.MaxStoreBytes = n
		return nil
	}},
	{Name: "media.reserve_bytes", Flag: "media-reserve-bytes", Usage: "JetStream storage kept from the media store for the task queue and buckets (0: none); a server that cannot hold it beside media.max_store_bytes refuses both at start", set: func(c *Config, s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		c.Media.ReserveBytes = n
		return nil
	}},
	{Name: "media.allowed_hosts", Flag: "media-allowed-hosts", Usage: "the only hosts users' files are downloaded from (names, or .suffix; comma-separated; \"*\": any public host; empty: WeCom's media host against WeCom's endpoint, any public host elsewhere)", set: func(c *Config, s string) error {
		c.Media.AllowedHosts = splitList(s)
		return nil
	}, list: func(c *Config, v []string) { c.Media.AllowedHosts = v }},
	{Name: "media.ttl", Flag: "media-ttl", Usage: "how long the media object store keeps a file (more than worker.deadline)", set: dur(func(c *Config) *time.Duration { return &c.Media.TTL })},
}

func init() { Keys = append(Keys, mediaKeys...) }

// validateMedia checks the media keys.
func (c *Config) validateMedia(bad func(key, format string, args ...any)) {
	const maxMax = 1 << 30
	if c.Media.MaxBytes < 1024 || c.Media.MaxBytes > maxMax {
		bad("media.max_bytes", "%d: want 1024 to %d bytes (default %d, 20 MB)", c.Media.MaxBytes, maxMax, DefaultMediaMaxBytes)
	}
	if c.Media.DownloadTimeout < time.Second || c.Media.DownloadTimeout > 4*time.Minute {
		bad("media.download_timeout", "%s: want 1s to 4m (WeCom's media URL works for about 5 minutes)", c.Media.DownloadTimeout)
	}
	if c.Media.MessageTimeout < time.Second || c.Media.MessageTimeout > 4*time.Minute {
		bad("media.message_timeout", "%s: want 1s to 4m: a message's files must be taken while WeCom's URLs work (about 5 minutes from its arrival)", c.Media.MessageTimeout)
	}
	if c.Media.Parallel < 1 || c.Media.Parallel > 256 {
		bad("media.parallel", "%d: want 1 to 256 downloads at once (default %d); each holds up to media.max_bytes in memory", c.Media.Parallel, DefaultMediaParallel)
	}
	if c.Media.TTL <= c.Worker.Deadline || c.Media.TTL < time.Minute {
		bad("media.ttl", "%s: want more than worker.deadline (%s), so a task's files outlive its run", c.Media.TTL, c.Worker.Deadline)
	}
	if c.Media.MaxStoreBytes < c.Media.MaxBytes {
		bad("media.max_store_bytes", "%d: want at least media.max_bytes (%d), so the largest file fits; the store is always bounded (default %d, 4 GiB)", c.Media.MaxStoreBytes, c.Media.MaxBytes, DefaultMediaMaxStoreBytes)
	}
	for i, h := range c.Media.AllowedHosts {
		switch {
		case h == AnyMediaHost && len(c.Media.AllowedHosts) > 1:
			bad(fmt.Sprintf("media.allowed_hosts[%d]", i), "%q means any public host: give it alone, or list the hosts", h)
		case h == AnyMediaHost:
		case h == "" || h == "." || strings.ContainsAny(h, "/: \t*"):
			bad(fmt.Sprintf("media.allowed_hosts[%d]", i), "%q: want a host name (wework.qpic.cn), a suffix (.qpic.cn) or \"*\" alone (any public host), no scheme, port or path", h)
		}
	}
	if c.Media.ReserveBytes < 0 {
		bad("media.reserve_bytes", "%d: want 0 (nothing set aside) or more bytes (default %d, 1 GiB)", c.Media.ReserveBytes, DefaultMediaReserveBytes)
	}
}
