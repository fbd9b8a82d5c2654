package access

import (
	"fmt"
	"unicode/utf8"

	"github.com/botctl/botctl/pkg/limits"
	"github.com/botctl/botctl/pkg/wecom"
)

// Rules are one bot's inbound settings: who may ask it, how long a
// question may be, and what its users read. Made by NewRules; read-only
// once made, so a bot's settings change by replacing its Rules (Bots).
type Rules struct {
	// AllowUsers and AllowChats, when not empty, are the only user ids and
	// group chat ids served.
	AllowUsers, AllowChats []string
	// MaxQuestionBytes refuses longer questions. Default 8000.
	MaxQuestionBytes int
	Texts            Texts
	// Limits are the bot's limits on use, checked before a task is
	// dispatched (limits.go); zero: none.
	Limits limits.Limits

	users, chats map[string]bool
}

// NewRules fills r's defaults and checks it.
func NewRules(r Rules) (*Rules, error) {
	if r.MaxQuestionBytes <= 0 {
		r.MaxQuestionBytes = 8000
	}
	if r.MaxQuestionBytes > wecom.MaxContentBytes {
		return nil, fmt.Errorf("access: MaxQuestionBytes %d exceeds WeCom's %d", r.MaxQuestionBytes, wecom.MaxContentBytes)
	}
	r.Texts.setDefaults()
	r.users, r.chats = set(r.AllowUsers), set(r.AllowChats)
	return &r, nil
}

// allowed applies the allowlist to a message of user in chat.
func (r *Rules) allowed(user, chat, chatType string) bool {
	return (len(r.users) == 0 || r.users[user]) && (chatType != wecom.ChatGroup || len(r.chats) == 0 || r.chats[chat])
}

// unfit is the reply to a question that cannot be asked (empty, too long,
// not UTF-8), or "" when it can.
func (r *Rules) unfit(question string) string {
	switch {
	case question == "":
		return r.Texts.Empty
	case len(question) > r.MaxQuestionBytes || !utf8.ValidString(question):
		return fmt.Sprintf(r.Texts.TooLong, r.MaxQuestionBytes)
	}
	return ""
}

// rules are bot's Rules now: Config.Bots', else Config's.
func (a *Access) rules(bot string) *Rules {
	if a.cfg.Bots != nil {
		if r := a.cfg.Bots.Rules(bot); r != nil {
			return r
		}
	}
	return a.def
}
