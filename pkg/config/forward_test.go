package config

import (
	"strings"
	"testing"
)

// A standby sends the node's token to the leader's registered address
// only on this machine, or over https to a host api.ca_file's CA
// verifies or api.forward_peers lists; each refusal names both keys (or,
// for plain http, api.cert_file).
func TestForwardAllowed(t *testing.T) {
	peers := API{ForwardPeers: []string{"node-b.internal", "10.0.0.12:8391", "[fd00::12]:8391", "node-d:443"}}
	withCA := API{CAFile: "/etc/botctl/tls/ca.pem"}
	for _, tc := range []struct {
		name string
		api  API
		addr string
		want string // "" allowed, else in the error
	}{
		{"loopback http", API{}, "http://127.0.0.1:8391", ""},
		{"localhost https", API{}, "https://localhost:8391", ""},
		{"loopback IPv6", API{}, "http://[::1]:8391", ""},
		{"elsewhere, system roots only", API{}, "https://10.0.0.11:8391", "api.ca_file"},
		{"elsewhere, system roots only, names both keys", API{}, "https://evil.example:443", "api.forward_peers"},
		{"elsewhere with the cluster's CA", withCA, "https://10.0.0.11:8391", ""},
		{"plain http elsewhere with the CA", withCA, "http://10.0.0.11:8391", "plain http"},
		{"plain http to a peer", peers, "http://10.0.0.12:8391", "plain http"},
		{"a listed host, any port", peers, "https://NODE-B.internal:9000", ""},
		{"a listed host:port", peers, "https://10.0.0.12:8391", ""},
		{"a listed host, another port", peers, "https://10.0.0.12:8392", "api.forward_peers"},
		{"a listed IPv6 host:port", peers, "https://[fd00:0::12]:8391", ""},
		{"the scheme's default port", peers, "https://node-d", ""},
		{"an unlisted host", peers, "https://node-c.internal:8391", "api.forward_peers"},
		{"a suffix of a listed host", peers, "https://evil-node-b.internal:8391", "api.forward_peers"},
		{"not a URL", peers, "node-b.internal:8391", "not an http(s) URL"},
		{"another scheme", peers, "ftp://node-b.internal", "not an http(s) URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.api.ForwardAllowed(tc.addr)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ForwardAllowed(%s) = %v, want allowed", tc.addr, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("ForwardAllowed(%s) = %v, want an error naming %q", tc.addr, err, tc.want)
			case tc.want == "api.ca_file" && !strings.Contains(err.Error(), "api.forward_peers"):
				t.Fatalf("ForwardAllowed(%s) = %v, want both keys named", tc.addr, err)
			}
		})
	}
}
