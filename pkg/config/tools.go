package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// The WeCom MCP gateway's keys: ai.tools, a bot's allowlist, and
// api.agent_tokens_file, the agents that may call it with a token of
// their own.

// toolNameRE is a business type's or a tool's name as WeCom spells them
// (msg, todo, get_message, smartsheet_get_records).
var toolNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// ValidateTools checks ai.tools: each entry a business type ("todo") or
// one tool of one ("msg/get_message"), lower case, none twice.
func ValidateTools(tools []string) error {
	for i, e := range tools {
		biz, tool, one := strings.Cut(e, "/")
		if !toolNameRE.MatchString(biz) || (one && !toolNameRE.MatchString(tool)) {
			return fmt.Errorf("config key ai.tools: entry %d %q: want BIZ_TYPE (every tool of it, e.g. todo) or BIZ_TYPE/TOOL (e.g. msg/get_message), lower-case letters, digits and _", i, e)
		}
		if slices.Contains(tools[:i], e) {
			return fmt.Errorf("config key ai.tools: entry %d %q is listed twice", i, e)
		}
	}
	return nil
}

// AgentTokens reads api.agent_tokens_file: token → agent name (nil when
// unset). Every line is "NAME TOKEN"; blank lines and # comments are
// skipped. A name is letters, digits, '.', '_' or '-'; no name or token
// twice; each token at least MinTokenBytes.
func (a API) AgentTokens() (map[string]string, error) {
	if a.AgentTokensFile == "" {
		return nil, nil
	}
	const key = "api.agent_tokens_file"
	raw, err := readSecretFile(key, a.AgentTokensFile)
	if err != nil {
		return nil, err
	}
	out, names := map[string]string{}, map[string]bool{}
	for n, line := range strings.Split(raw, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) != 2 || !agentNameRE.MatchString(f[0]):
			return nil, fmt.Errorf("config key %s: %s line %d: want \"NAME TOKEN\" (NAME: letters, digits, '.', '_', '-')", key, a.AgentTokensFile, n+1)
		case len(f[1]) < MinTokenBytes:
			return nil, fmt.Errorf("config key %s: %s line %d: agent %s's token has %d bytes, want at least %d (openssl rand -hex 32)", key, a.AgentTokensFile, n+1, f[0], len(f[1]), MinTokenBytes)
		case names[f[0]]:
			return nil, fmt.Errorf("config key %s: %s line %d: agent %s is named twice", key, a.AgentTokensFile, n+1, f[0])
		case out[f[1]] != "":
			return nil, fmt.Errorf("config key %s: %s line %d: agent %s has the token of agent %s: give each its own", key, a.AgentTokensFile, n+1, f[0], out[f[1]])
		}
		names[f[0]], out[f[1]] = true, f[0]
	}
	return out, nil
}

var agentNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
