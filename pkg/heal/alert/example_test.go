package alert_test

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/heal/alert"
	"github.com/botctl/botctl/pkg/heal/incident"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Wiring in serve: one alerter per node, running only on the elected one.
func ExampleRunElected() {
	var (
		ctx   context.Context  // the node's lifetime
		cli   *clientv3.Client // the node's etcd client
		store *jetstream.Store // jetstream.Declare
		log   zerolog.Logger   // the node's logger
	)
	robotURL, _ := os.ReadFile("/etc/botctl/wecom_robot_url") // alert.wecom_robot_url_file
	a, err := alert.New(incident.NewStore(store.Incidents()), alert.Config{
		NodeID: "node-1",
		Sinks: []alert.Sink{
			alert.NewWeComRobot(strings.TrimSpace(string(robotURL))),
			alert.NewWebhook("https://ops.example.com/botctl-alerts"), // alert.webhook_url
		},
		Owners:    map[string]string{"sales-bot": "alice"}, // bots[].owner
		Synthetic: 24 * time.Hour,                          // alert.synthetic; 0 in config → alert.SyntheticOff
		Logger:    log,
	})
	if err != nil {
		return // names the field: refuse to start
	}
	done := make(chan error, 1)
	go func() { done <- alert.RunElected(ctx, cli, alert.DefaultPrefix, "node-1", a) }()
	// On shutdown: cancel ctx, then <-done (queued alerts get up to
	// Config.Timeout to go out; the etcd session is closed, so another
	// node takes over at once).
	<-done
}
