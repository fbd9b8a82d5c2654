package serve

import (
	"context"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/mcpgw"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
)

// mcpAgentBackend is the agent the MCP gateway's audit names for the
// calls of this node's AI backends (the openai backend's function calls).
const mcpAgentBackend = "backend"

// mcpGateway is the node's WeCom MCP gateway: the node API's token and
// api.agent_tokens_file's (agents: token → agent) open it; bots'
// ai.tools are read live.
func (n *Node) mcpGateway(token string, agents map[string]string) *mcpgw.Gateway {
	return mcpgw.New(mcpgw.Options{Node: n.cfg.NodeID, Etcd: n.etcd, Allow: n.bots, NodeToken: token, AgentTokens: agents,
		Registry: n.obs.metrics.Registry, Logger: n.log})
}

// newBackfiller is the node's gap backfill (pkg/heal/backfill), bound
// to JetStream later.
func newBackfiller(cfg config.Config, log zerolog.Logger) *backfill.Backfiller {
	return backfill.New(backfill.Options{Source: backfill.SourceFor(cfg.Backfill.HistoryURL), Overlap: cfg.Backfill.Overlap, MaxMessages: cfg.Backfill.MaxMessages,
		Rate: cfg.Backfill.Rate, AuditEvery: cfg.Backfill.AuditEvery, Logger: log})
}

// holdMCP shares the URLs of the bot's allowed WeCom MCP servers while
// the term lasts (mcpgw.Gateway.Hold).
func (n *Node) holdMCP(ctx context.Context, term *election.Term, conn *wecom.Conn) {
	n.mcp.Hold(ctx, mcpgw.Term{Bot: term.Bot, Key: term.Key, Rev: term.Rev, Lease: term.Lease}, conn)
}
