// Package infra runs the shared state botctl needs inside the botctl process
// itself: a single-node etcd (control plane: elections, node registry) and a
// NATS server with JetStream (data plane: task queue, KV buckets).
//
// This is the "embedded default" of docs/architecture.md: with no etcd or
// NATS endpoints configured, a node starts both in its data dir. It is meant
// for one-machine setups, demos and tests. It gives no redundancy: when this
// process stops, etcd and NATS stop with it. Production points botctl at real
// clusters instead and does not use this package.
package infra
