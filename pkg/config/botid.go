package config

import (
	"errors"
	"regexp"
	"strings"
)

// Bot is one WeCom bot's credentials and what it sets of its own.
type Bot struct {
	ID         string `yaml:"id"`
	Secret     string `yaml:"secret"`
	SecretFile string `yaml:"secret_file"`
	// Owner is who answers for the bot: named in its incidents and alerts.
	Owner string `yaml:"owner"`
	// Settings are the entry's own sections (ai, access, memory, limits),
	// as written: each key overrides the top level's for this bot
	// (Config.BotSettings). Nil: the top level's throughout.
	Settings map[string]any `yaml:"-"`
}

// String never shows the secret.
func (b Bot) String() string { return b.ID + ":<redacted>" }

// BotSecretEnv is the variable that holds a bot's secret.
func BotSecretEnv(botID string) string {
	return "BOTCTL_BOT_" + strings.ToUpper(regexp.MustCompile(`[^A-Za-z0-9]`).ReplaceAllString(botID, "_")) + "_SECRET"
}

// ParseBot reads "ID:SECRET" (or "ID" alone, the secret then coming from
// the environment or a file).
func ParseBot(s string) (Bot, error) {
	id, secret, _ := strings.Cut(s, ":")
	if id == "" {
		return Bot{}, errors.New(`want ID with the secret in the environment (--bot mybot with $BOTCTL_BOT_MYBOT_SECRET set), or secret_file in the config file`)
	}
	return Bot{ID: id, Secret: secret}, nil
}
