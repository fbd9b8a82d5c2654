// Package jetstream is botctl's data plane in NATS JetStream: the task work
// queue that is also the per-conversation mutex, the KV buckets every node
// shares (task records, output, conversation context, watermarks), and the
// local bbolt spool that keeps received tasks while JetStream is out of
// reach.
//
// It keeps JetStream's own types: Store hands out the nats.go Stream,
// Consumer and KeyValue it declared, and adds only what botctl must get
// exactly right on top of them. nats.go's package has this package's name,
// so botctl imports it as natsjs everywhere (natsjs.Stream, …).
//
// # What is guaranteed
//
// Declare is idempotent (create or update, never delete): every node calls
// it at start, in any order, any number of times. It never changes the
// replicas or limits of what is deployed: a node whose options differ
// keeps the deployment's values and logs each difference (Mismatch). One
// limit is set where none is: a media store deployed without a bound takes
// Options.MediaMaxBytes (logged), so that files never fill the storage the
// queue and the buckets need.
//
// A conversation has at most one task in the queue, queued or running: the
// stream keeps one message per subject <prefix>.tasks.<bot>.<conversation>
// and the server refuses the next one. PublishTask reports that refusal as
// ErrConversationBusy, an answer for the user, and never as ErrUnavailable:
// both arrive from the server with code 503, and even the err_code (10077)
// is shared with other store failures such as a stream shutting down, so
// the classification reads the err_code and the server's description.
//
// A task is queued at most once per msgid within the duplicate window
// (default 10m): a repeat is acknowledged with Duplicate set, whether the
// first copy is still queued or already done. This is what makes retries,
// spool drains and WeCom's resent callbacks safe.
//
// ErrUnavailable means JetStream did not confirm the task; it may or may
// not be stored. Spool it (or use another tier) and republish it with the
// same msgid: the duplicate window settles the doubt.
//
// A Spool entry is on disk when Append returns, and is deleted only after
// its PublishFunc returned nil; a crash in between forwards it once more,
// which the duplicate window absorbs.
//
// A Spool is bounded (SpoolMaxEntries, SpoolMaxBytes): past a bound Append
// refuses with ErrSpoolFull and keeps nothing. A Forwarder with an Expiry
// never queues an entry that waited longer: it hands it to its Expired.
//
// # What is not guaranteed
//
// Exactly-once queueing holds only within the duplicate window: a task
// spooled for longer, whose first publish did reach the server, is queued
// twice. Keep DuplicateWindow longer than the outages the spool must cover.
//
// A task whose deliveries reach TaskMaxDeliver stays in the queue and
// keeps its conversation busy for good; the server will not deliver it
// again. A worker that fails a task on its FinalDelivery must call GiveUp.
// If the worker dies during that last delivery nobody holds the task any
// more: ReleaseConversation or ReleaseQueued (`botctl tasks release`, or
// `nats stream rmm`) frees it; package task's max-deliveries watch and
// sweep do so themselves, even when the task's record cannot be written.
// A last delivery that was never run (it reached a worker that was
// stopping) is not nak'd but requeued with fresh deliveries (Requeue).
//
// Order is kept per spool and per stream, not across tiers: while a node's
// spool is not empty, the node must spool new tasks too (see Spool).
package jetstream
