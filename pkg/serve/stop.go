package serve

import (
	"time"

	"github.com/botctl/botctl/pkg/node"
	"github.com/botctl/botctl/pkg/pusher"
)

// apiShutdownTimeout bounds the node API's shutdown, the last step of a
// graceful stop (requests in flight finish; exec's tasks run on the worker,
// not in the request).
const apiShutdownTimeout = 5 * time.Second

// GracefulStopBound is the longest a graceful stop (SIGTERM) of a node can
// take, with the defaults serve.Run uses, before its bots are handed over
// and its API is closed: the sum of the bound of every step of Run's
// shutdown order that runs one after the other. Each term (all at once)
// lets its pusher's steps in flight end (pusher.StepTimeout), closes its
// connection, drains the callbacks it delivered (node.DefaultDrainTimeout)
// and resigns (node.ResignTimeout); the node waits for the last
// leader event records (node.LeaderEventTimeout) and revokes its registry
// lease (node.RevokeTimeout); then the API shuts down (apiShutdownTimeout).
//
// Not included, because it comes after the resigns and is bounded by the
// inbound and JetStream request timeouts rather than a constant here: the
// inbound handlers a drain gave up on, and the worker handing back the
// tasks it was running (beside the API's shutdown). A kill then costs a
// redelivery after the ack wait or a gap backfill, never a message.
//
// systemd's TimeoutStopSec (deploy/botctl.service) must exceed it, or a
// slow stop is killed before its resign and the standbys wait for a
// deposition instead of taking over at once.
func GracefulStopBound() time.Duration {
	return pusher.StepTimeout + node.DefaultDrainTimeout + node.ResignTimeout + node.LeaderEventTimeout + node.RevokeTimeout +
		apiShutdownTimeout
}
