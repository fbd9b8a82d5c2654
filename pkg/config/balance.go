package config

import "time"

// Balance is the balancer on this node (election.balance): every node
// that runs it keeps the bots each live node leads within Tolerance of
// its even share (the bots it may lead, by their env gate, weighted by
// the nodes' Weight), moving a bot by a graceful handover and no bot
// more than once per Cooldown.
type Balance struct {
	// Enabled: this node hands bots over and steps back for the plan.
	// Default true. Off, the plans move no bot away from this node.
	Enabled bool `yaml:"enabled"`
	// Interval is how often the node looks at the spread. Default 10s.
	Interval time.Duration `yaml:"interval"`
	// Tolerance is how far from its even share a node's count may be:
	// 0.1 is ±10 %. Default 0.1.
	Tolerance float64 `yaml:"tolerance"`
	// Cooldown: a bot the balancer moved is not moved by it again for
	// this long (its leader failing still moves it). Default 10m.
	Cooldown time.Duration `yaml:"cooldown"`
	// Weight is this node's capacity relative to the others': a node of
	// weight 2 is given twice the bots of a node of weight 1. Default 1.
	Weight float64 `yaml:"weight"`
}

func balanceDefaults() Balance {
	return Balance{Enabled: true, Interval: 10 * time.Second, Tolerance: 0.1, Cooldown: 10 * time.Minute, Weight: 1}
}

var balanceKeys = []Key{
	{Name: "election.balance.enabled", Flag: "balance", Usage: "this node balances leadership with the others (hands bots over, steps back for a planned new leader)", set: boolean(func(c *Config) *bool { return &c.Election.Balance.Enabled })},
	{Name: "election.balance.interval", Flag: "balance-interval", Usage: "how often the balancer looks at the spread of leadership", set: dur(func(c *Config) *time.Duration { return &c.Election.Balance.Interval })},
	{Name: "election.balance.tolerance", Flag: "balance-tolerance", Usage: "how far from its even share a node's count of led bots may be (0.1: ±10 %)", set: float(func(c *Config) *float64 { return &c.Election.Balance.Tolerance })},
	{Name: "election.balance.cooldown", Flag: "balance-cooldown", Usage: "a bot the balancer moved is not moved by it again for this long", set: dur(func(c *Config) *time.Duration { return &c.Election.Balance.Cooldown })},
	{Name: "election.balance.weight", Flag: "balance-weight", Usage: "this node's capacity for leading bots relative to the other nodes'", set: float(func(c *Config) *float64 { return &c.Election.Balance.Weight })},
}

func init() { Keys = append(Keys, balanceKeys...) }

// validateElection checks the kick and balance keys of election.
func (c *Config) validateElection(bad func(key, format string, args ...any)) {
	if c.Election.KickLimit < 1 {
		bad("election.kick_limit", "must be at least 1, got %d", c.Election.KickLimit)
	}
	if c.Election.KickWindow <= 0 {
		bad("election.kick_window", "must be positive, got %s", c.Election.KickWindow)
	}
	b := c.Election.Balance
	if b.Interval < time.Second {
		bad("election.balance.interval", "%s: want at least 1s (each look reads every election queue)", b.Interval)
	}
	if b.Tolerance <= 0 || b.Tolerance >= 1 {
		bad("election.balance.tolerance", "%g: want more than 0 and less than 1 (0.1 is ±10 %%)", b.Tolerance)
	}
	if b.Cooldown < b.Interval || b.Cooldown <= 0 {
		bad("election.balance.cooldown", "%s: want at least election.balance.interval (%s); 10m keeps a bot from moving back and forth", b.Cooldown, b.Interval)
	}
	if b.Weight <= 0 {
		bad("election.balance.weight", "%g: want more than 0 (1: as much as a usual node)", b.Weight)
	}
}
