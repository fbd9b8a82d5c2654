package jetstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/jetstream"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// On a cluster of three servers (replicas 3) whose storage cannot hold
// the media bound beside the reservation, JetStream refuses the placement
// (10005, "no suitable peers for placement, insufficient storage"), not a
// reservation (10047) as one server does: the start fails all the same,
// naming the keys to lower, instead of waiting for servers that are up.
func TestReservationTooLargeForAClusterNamesTheKeys(t *testing.T) {
	c := testenv.NewNATSCluster(t, 3)
	c.MaxStore = 64 << 20
	for i := range 3 {
		c.Start(t, i)
	}
	// The cluster is up when a small store can be declared on it.
	testenv.DeclareOnCluster(t, c.URLs(), jetstream.Options{Replicas: 3, MediaMaxBytes: 8 << 20, ReserveBytes: 8 << 20, Prefix: "small"})
	nc, err := nats.Connect(c.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = jetstream.Declare(ctx, js, jetstream.Options{Replicas: 3, MediaMaxBytes: 16 << 20, ReserveBytes: 100 << 20, Logger: zerolog.Nop()})
	if err == nil || !strings.Contains(err.Error(), "media.reserve_bytes") || !jetstream.StorageTooSmall(err) {
		t.Fatalf("100 MiB reserved on 64 MiB of storage a server: %v, want an error naming media.reserve_bytes", err)
	}
	_, err = jetstream.Declare(ctx, js, jetstream.Options{Replicas: 3, MediaMaxBytes: 100 << 20, Prefix: "big", Logger: zerolog.Nop()})
	if err == nil || !strings.Contains(err.Error(), "media.max_store_bytes") || !jetstream.StorageTooSmall(err) {
		t.Fatalf("a media bound of 100 MiB on 64 MiB of storage a server: %v, want an error naming media.max_store_bytes", err)
	}
}
