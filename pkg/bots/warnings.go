package bots

import (
	"fmt"
	"sort"

	"github.com/botctl/botctl/pkg/redact"
)

// Warnings are /readyz's lines for the overrides this node refuses, one
// per bot, sorted. The reason names a config key, never a secret; it is
// redacted all the same, /readyz asking for no token.
func (b *Live) Warnings() []string {
	if b == nil {
		return nil
	}
	var out []string
	for bot, v := range b.Views() {
		if v.RefusedRevision == 0 {
			continue
		}
		runs := "the config file's settings"
		if v.Revision != 0 {
			runs = fmt.Sprintf("the override of revision %d it had", v.Revision)
		}
		out = append(out, fmt.Sprintf("bot %s: its settings override in etcd (revision %d) is refused by this node: %s; the bot is served with %s (botctl bots show --bot %s; fix or clear the override)",
			bot, v.RefusedRevision, redact.String(v.Refused), runs, bot))
	}
	sort.Strings(out)
	return out
}
