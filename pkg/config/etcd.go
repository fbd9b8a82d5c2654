package config

import (
	"fmt"
	"net/url"
	"time"

	"github.com/botctl/botctl/pkg/redact"
)

// Etcd is the control plane. No endpoints: an embedded single-node etcd in
// DataDir (loopback, no TLS, no users: none of the keys below apply).
type Etcd struct {
	Endpoints   []string      `yaml:"endpoints"`
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// CAFile is the PEM CA that signed the members' certificates ("": the
	// system's roots). Any of the TLS keys needs https:// endpoints.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are this node's client certificate and key, for
	// members started with --client-cert-auth. Both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// Username and PasswordFile authenticate to etcd's RBAC (etcdctl auth
	// enable); the password is read from the file, never from argv. Both
	// or neither; over http:// only to a loopback endpoint.
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	// CompactRetention is the history nodes keep when they compact an
	// external etcd themselves (every CompactRetention, to the revision
	// of one CompactRetention earlier, as etcd's periodic compactor); 0:
	// they do not. The embedded etcd compacts itself. Default 1h.
	CompactRetention time.Duration `yaml:"compact_retention"`
}

// validate checks the etcd keys, each error through bad.
func (e Etcd) validate(bad func(key, format string, args ...any)) {
	for i, ep := range e.Endpoints {
		if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad(fmt.Sprintf("etcd.endpoints[%d]", i), "%q: want http://HOST:PORT or https://HOST:PORT", redact.URL(ep))
		}
	}
	if e.DialTimeout <= 0 {
		bad("etcd.dial_timeout", "must be positive, got %s", e.DialTimeout)
	}
	if e.CompactRetention != 0 && e.CompactRetention < time.Minute {
		bad("etcd.compact_retention", "%s: want 0 (nodes do not compact etcd) or at least 1m, e.g. 1h", e.CompactRetention)
	}
}
