package backfill

import (
	"github.com/botctl/botctl/jetstream"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// WatermarkBucket is what the gap backfill asks of JetStream
// (*jetstream.Store): the bucket the bots' inbound watermarks are kept
// in, read by a pass (LoadWatermark) and written by the Tracker.
type WatermarkBucket interface {
	Watermarks() natsjs.KeyValue
}

// What the node passes.
var _ WatermarkBucket = (*jetstream.Store)(nil)
