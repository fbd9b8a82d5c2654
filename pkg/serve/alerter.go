package serve

import (
	"fmt"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/alert"
	"github.com/botctl/botctl/pkg/heal/incident"
)

// newAlerter builds the alerter of the configured sinks (nil, nil: none).
// One node of the cluster runs it at a time (alert.RunElected).
func (n *Node) newAlerter(store *jetstream.Store) (*alert.Alerter, error) {
	cfg := n.cfg
	robot, webhook, err := cfg.Alert.AlertSinks()
	if err != nil {
		return nil, fmt.Errorf("alert sinks: %w", err)
	}
	var sinks []alert.Sink
	if robot != "" {
		sinks = append(sinks, alert.SubscribeNames(countSends(alert.NewWeComRobot(robot)), cfg.Alert.WeComRobotLevels))
	}
	if webhook != "" {
		sinks = append(sinks, alert.SubscribeNames(countSends(alert.NewWebhook(webhook)), cfg.Alert.WebhookLevels))
	}
	if len(sinks) == 0 {
		n.log.Warn().Msg("no alert sink (alert.wecom_robot_url_file, alert.webhook_url): incidents are recorded (botctl incidents) but nobody is paged")
		return nil, nil
	}
	owners := map[string]string{}
	for _, b := range cfg.Bots {
		if b.Owner != "" {
			owners[b.ID] = b.Owner
		}
	}
	syn := cfg.Alert.Synthetic
	if syn == 0 {
		syn = alert.SyntheticOff
	}
	return alert.New(incident.NewStore(store.Incidents()), alert.Config{
		NodeID: cfg.NodeID, Sinks: sinks, Owners: owners, Synthetic: syn,
		Window: cfg.Alert.Window, EscalateAfter: cfg.Alert.EscalateAfter, FlapWindow: cfg.Alert.FlapWindow,
		Metrics: n.obs.metrics,
		Logger:  n.base, // alert.New adds node and component
	})
}
