package config

import "github.com/botctl/botctl/jetstream"

// DataPlane is what this configuration asks of the shared data plane: the
// options a node declares its streams and buckets with (jetstream.Declare),
// and those `botctl config check --nats` compares with the deployed ones.
// Declare creates what is missing with them and keeps a deployed value that
// differs, reporting it under the key named in jetstream.Mismatch (but for
// a media store deployed without a bound, which takes media.max_store_bytes).
func (c Config) DataPlane() jetstream.Options {
	return jetstream.Options{Prefix: c.NATS.Prefix, Replicas: c.NATS.Replicas, MediaTTL: c.Media.TTL,
		MediaMaxBytes: c.Media.MaxStoreBytes, ReserveBytes: c.Media.ReserveBytes}
}
