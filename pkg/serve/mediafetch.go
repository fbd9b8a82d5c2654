package serve

import (
	"strings"

	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/media"
)

// mediaFetcher downloads users' files under the media keys. Against
// WeCom itself (a wss:// URL) the policy is strict: https only, public
// addresses only, an aeskey with every file; the simulator's ws:// links
// are http on loopback without keys.
func mediaFetcher(cfg config.Config) *media.Fetcher {
	return media.New(media.Config{MaxBytes: cfg.Media.MaxBytes, Timeout: cfg.Media.DownloadTimeout, MessageTimeout: cfg.Media.MessageTimeout,
		Parallel: cfg.Media.Parallel, Policy: media.Policy{Strict: strings.HasPrefix(cfg.WeCom.URL, "wss://"), Hosts: cfg.MediaHosts()}})
}
