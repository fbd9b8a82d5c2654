package serve

import (
	"github.com/botctl/botctl/pkg/config"
	"github.com/botctl/botctl/pkg/node"
)

// balanceConfig is the node's balancer from election.balance.
func balanceConfig(b config.Balance) node.BalanceConfig {
	return node.BalanceConfig{Off: !b.Enabled, Interval: b.Interval, Tolerance: b.Tolerance, Cooldown: b.Cooldown, Weight: b.Weight}
}
