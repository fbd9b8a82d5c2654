package main

import (
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
)

// A CLI command run without the nodes' nats.replicas leaves the
// deployment's replica count alone. It declared the store with the
// default (1): every `botctl tasks list` scaled an R3 stream, consumer and
// buckets down to R1 (found by test/chaos: the next node restart then
// failed to declare its consumer, 10126).
func TestCLIKeepsTheDeploymentsReplicas(t *testing.T) {
	urls := testenv.StartNATSCluster(t, 3)
	st, _ := testenv.DeclareOnCluster(t, urls, jetstream.Options{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := run(t, "tasks", "list", "--nats", urls[1]); err != nil {
		t.Fatalf("tasks list: %v\n%s", err, out)
	}
	info, err := st.TaskStream().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := st.Workers().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || ci.Config.Replicas != 3 {
		t.Fatalf("after tasks list: stream R%d, consumer R%d; want both R3", info.Config.Replicas, ci.Config.Replicas)
	}
}

// A CLI command run without the nodes' media keys leaves the media
// store's bound and the reservation as the nodes declared them (its own
// config asks for the defaults: a 4 GiB bound, 1 GiB reserved).
func TestCLIKeepsTheMediaBound(t *testing.T) {
	env := testenv.StartJetStream(t, jetstream.Options{MediaMaxBytes: 8 << 20, ReserveBytes: 4 << 20})
	if out, err := run(t, "tasks", "list", "--nats", env.Server.ClientURL()); err != nil {
		t.Fatalf("tasks list: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, want := range map[string]int64{"OBJ_BOTCTL_MEDIA": 8 << 20, "BOTCTL_RESERVE": 4 << 20} {
		st, err := env.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.MaxBytes; got != want {
			t.Errorf("after tasks list: %s MaxBytes %d, want the nodes' %d", name, got, want)
		}
	}
}
