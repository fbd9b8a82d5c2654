// Package etcdkeys is the layout of every key botctl keeps in etcd: the
// one place their paths are spelled (as jetstream.Names is for NATS). The
// packages that own each kind of key take their defaults from here.
//
// Under Root:
//
//	nodes/<node>                  node registry record, bound to the node's lease (pkg/node)
//	gate/<bot>                    the env allowed to connect bot (pkg/node)
//	transitions/<bot>/<unix ns>   the bot's leader events (pkg/node)
//	elect/<bot>/<lease hex>       the bot's concurrency.Election (election)
//	election/<bot>                the election of botctl before that layout, still checked (election)
//	pulse/<bot>                   the leader's liveness pulse, per bot (election, botctl 0.5.0 and leaders without a node pulse)
//	nodepulse/<node>              one node's liveness pulse for every bot it leads (election.Batch)
//	balance/<bot>                 the bot's last move by the balancer, bound to a lease of the move cooldown (pkg/node)
//	settings/<bot>                the bot's settings override, `botctl bots set` (pkg/botsettings)
//	bots/<bot>                    the bot registry, `botctl bots add` (pkg/fleet)
//	alerter                       the cluster's alerter election (pkg/heal/alert)
//	declare/<nats prefix>         the lock held while declaring JetStream's streams (pkg/serve)
//	mcp/<bot>/<biz_type>          the URL of a WeCom MCP server the bot's holder was given, bound to its term's lease (pkg/mcpgw)
//	health-probe                  read by readiness checks; never written
//	compaction-probe              read at past revisions to find etcd's compaction; never written
//
// What is guaranteed: these paths are those every release so far has
// written; changing one is a change of stored format (docs/upgrading.md).
package etcdkeys

// Root is the root of every key botctl keeps in etcd.
const Root = "/botctl/"

// The keys and directories under Root.
const (
	NodesDir          = "nodes/"
	GateDir           = "gate/"
	TransitionsDir    = "transitions/" // named before leader events were; records already in etcd stay readable
	ElectDir          = "elect/"
	LegacyElectionDir = "election/"
	PulseDir          = "pulse/"
	NodePulseDir      = "nodepulse/"
	BalanceDir        = "balance/"
	SettingsDir       = "settings/"
	BotsDir           = "bots/"
	Alerter           = "alerter"
	DeclareDir        = "declare/"
	MCPDir            = "mcp/"
	HealthProbe       = "health-probe"
	CompactionProbe   = "compaction-probe"
)

// Layout is the keys under one root (Root by default; a test or a second
// deployment sharing an etcd may use another).
type Layout struct{ Root string }

// Default is the layout under Root.
var Default = Layout{Root: Root}

// Node is node id's registry record.
func (l Layout) Node(id string) string { return l.Root + NodesDir + id }

// BalanceMove is bot's last move by the balancer.
func (l Layout) BalanceMove(bot string) string { return l.Root + BalanceDir + bot }

// Setting is bot's settings override.
func (l Layout) Setting(bot string) string { return l.Root + SettingsDir + bot }

// Bot is bot's registry record.
func (l Layout) Bot(bot string) string { return l.Root + BotsDir + bot }

// Declare is the lock of declaring the JetStream streams named with
// natsPrefix.
func (l Layout) Declare(natsPrefix string) string { return l.Root + DeclareDir + natsPrefix }

// HealthProbe is the key readiness checks read.
func (l Layout) HealthProbe() string { return l.Root + HealthProbe }

// MCPBot is the directory of bot's shared WeCom MCP server URLs.
func (l Layout) MCPBot(bot string) string { return l.Root + MCPDir + bot + "/" }

// MCP is the shared URL of bot's WeCom MCP server of bizType.
func (l Layout) MCP(bot, bizType string) string { return l.MCPBot(bot) + bizType }
