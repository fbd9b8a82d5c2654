package config

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// ForwardPeers are the hosts (host) or API addresses (host:port) a
// standby may forward a send to with the node's API token, beside what
// api.ca_file lets it verify (ForwardAllowed): the nodes' registered API
// addresses come from etcd, and an explicit list keeps a writer of etcd
// from naming a server of its own there to collect the token.

// validForwardPeer checks one api.forward_peers entry: a host name or IP,
// or one with a port, never a URL or a pattern.
func validForwardPeer(p string) error {
	if p == "" {
		return fmt.Errorf("an empty entry")
	}
	if strings.Contains(p, "/") || strings.ContainsAny(p, "*?@ ") {
		return fmt.Errorf("%q is not a host or host:port (no scheme, path, user or pattern: e.g. node-b.internal or 10.0.0.12:8391)", p)
	}
	host, port := p, ""
	if h, pt, err := net.SplitHostPort(p); err == nil {
		host, port = h, pt
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q: port %q is not 1 to 65535", p, port)
		}
	} else if strings.Contains(p, ":") && net.ParseIP(p) == nil {
		return fmt.Errorf("%q is not a host or host:port (an IPv6 address with a port is [ADDR]:PORT)", p)
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	if host == "" || len(host) > 253 {
		return fmt.Errorf("%q: no host", p)
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 || strings.Trim(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
			return fmt.Errorf("%q: %q is not a host name", p, host)
		}
	}
	return nil
}

// ForwardPeer reports whether the API at addr (a registered URL) is one
// of api.forward_peers: its host listed alone, or with addr's port (the
// scheme's default when addr has none).
func (a API) ForwardPeer(addr string) bool {
	u, err := url.Parse(addr)
	if err != nil || u.Hostname() == "" {
		return false
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	for _, p := range a.ForwardPeers {
		ph, pp := p, ""
		if h, pt, err := net.SplitHostPort(p); err == nil {
			ph, pp = h, pt
		}
		if sameHost(ph, host) && (pp == "" || pp == port) {
			return true
		}
	}
	return false
}

// sameHost compares two hosts: IPs by value, names without case.
func sameHost(a, b string) bool {
	if ia, ib := net.ParseIP(a), net.ParseIP(b); ia != nil || ib != nil {
		return ia != nil && ib != nil && ia.Equal(ib)
	}
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// ForwardAllowed says whether a standby may send the node's API token to
// the leader's API at addr, and if not, why (naming the keys that allow
// it): on this machine (http or https); or https to another machine whose
// certificate is verified against api.ca_file's CA, not the system's
// roots, or whose host is in api.forward_peers. Never plain http to
// another machine.
func (a API) ForwardAllowed(addr string) error {
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("the leader's registered API address %q is not an http(s) URL", addr)
	}
	if LoopbackHost(u.Hostname()) {
		return nil
	}
	if u.Scheme == "http" {
		return fmt.Errorf("the leader's API is plain http on another machine: the token is not sent over the network in clear text (set api.cert_file on the nodes)")
	}
	if a.CAFile != "" || a.ForwardPeer(addr) {
		return nil
	}
	return fmt.Errorf("forwarding to another machine needs api.ca_file (the leader's certificate verified against the cluster's CA, not the system's roots) "+
		"or the leader's host in api.forward_peers: the address comes from etcd, and the token is sent only where one of them vouches for it (%s is in neither)", u.Host)
}
