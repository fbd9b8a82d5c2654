package config

import "github.com/botctl/botctl/pkg/clusterkey"

// Secrets is how this node opens the secrets kept in etcd (the bot
// registry's, `botctl bots add`).
type Secrets struct {
	// KeyFile is the cluster key: 64 hexadecimal characters (32 random
	// bytes, `openssl rand -hex 32`), the same file on every node, mode
	// 600 (pkg/clusterkey). Unset: the node serves the config file's bots
	// only and refuses those of the registry, saying so. Set, it must be
	// a valid key file, checked at start.
	KeyFile string `yaml:"key_file"`
}

// validateSecrets checks the key file when secrets.key_file is set: a
// typo or a bad file refuses the start rather than every registered bot.
func (c *Config) validateSecrets(errs *[]error) {
	if c.Secrets.KeyFile == "" {
		return
	}
	if _, err := clusterkey.Load(c.Secrets.KeyFile); err != nil {
		*errs = append(*errs, err)
	}
}
