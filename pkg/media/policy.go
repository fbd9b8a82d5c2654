package media

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Policy is which media URLs a Fetcher downloads. WeCom's are https
// links, valid about five minutes, each with an aeskey; the simulator's
// are http on loopback without one.
//
// Guarantees, with Strict: only https URLs are fetched, redirects
// included; only public addresses are dialled (a name that resolves to a
// loopback, private, link-local, multicast or unspecified address is
// refused when the connection is made, after resolution, so no DNS answer
// points a download inside the node's network), with one exception: a
// host named exactly in Hosts (not by a suffix) may resolve to a
// link-local address, as Tencent Cloud's DNS answers for its object
// storage inside its own network (169.254.0.47); an item without an aeskey
// is refused. With Hosts, only those hosts are fetched from, redirects
// included. What is not guaranteed: WeCom does not promise the hosts its
// media URLs use (config.WeComMediaHost is the one it has used), so an
// operator may have to widen Hosts (media.allowed_hosts).
type Policy struct {
	Strict bool
	// Hosts, if not empty, are the only hosts downloaded from: a name
	// ("wework.qpic.cn") or a suffix (".qpic.cn": any host under it).
	Hosts []string
}

// ErrRefused is a URL, a redirect or an address the Policy refuses.
var ErrRefused = errors.New("refused by the media policy")

// checkURL refuses u unless its scheme and host are allowed.
func (p Policy) checkURL(u *url.URL) error {
	switch {
	case u.Scheme != "https" && (p.Strict || u.Scheme != "http"):
		want := "https"
		if !p.Strict {
			want = "http or https"
		}
		return fmt.Errorf("%w: scheme %q (want %s)", ErrRefused, u.Scheme, want)
	case u.Hostname() == "":
		return fmt.Errorf("%w: no host", ErrRefused)
	case !p.allowedHost(u.Hostname()):
		return fmt.Errorf("%w: host %s is not in media.allowed_hosts", ErrRefused, u.Hostname())
	}
	return nil
}

func (p Policy) allowedHost(host string) bool {
	if len(p.Hosts) == 0 {
		return true
	}
	host = normalHost(host)
	for _, h := range p.Hosts {
		h = strings.ToLower(h)
		if host == strings.TrimPrefix(h, ".") || strings.HasPrefix(h, ".") && strings.HasSuffix(host, h) {
			return true
		}
	}
	return false
}

// named reports whether host is named exactly in Hosts (not by a suffix).
func (p Policy) named(host string) bool {
	host = normalHost(host)
	for _, h := range p.Hosts {
		if !strings.HasPrefix(h, ".") && strings.ToLower(h) == host {
			return true
		}
	}
	return false
}

func normalHost(host string) string { return strings.ToLower(strings.TrimSuffix(host, ".")) }

// publicAddr reports whether a is an address a Strict policy dials.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsValid() && !a.IsLoopback() && !a.IsPrivate() && !a.IsLinkLocalUnicast() && !a.IsLinkLocalMulticast() &&
		!a.IsInterfaceLocalMulticast() && !a.IsMulticast() && !a.IsUnspecified() &&
		!netip.MustParsePrefix("100.64.0.0/10").Contains(a) // carrier-grade NAT, shared address space
}

// control refuses a dial to an address that is not public (Strict); for
// a host named exactly in Hosts, a link-local unicast address is taken
// too (a cloud's internal endpoint for the named host).
func (p Policy) control(host, address string) error {
	if !p.Strict {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err == nil && publicAddr(ap.Addr()) {
		return nil
	}
	if err == nil && ap.Addr().Unmap().IsLinkLocalUnicast() && p.named(host) {
		return nil
	}
	return fmt.Errorf("%w: address %s of %s is not public", ErrRefused, address, host)
}

// client is the http.Client a Fetcher with this policy downloads with:
// dials checked by control, redirects by checkURL (at most 5).
func (p Policy) client() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // a proxy would dial on our behalf, past control
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(addr)
		d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second,
			Control: func(_, address string, _ syscall.RawConn) error { return p.control(host, address) }}
		return d.DialContext(ctx, network, addr)
	}
	return &http.Client{Transport: t, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return fmt.Errorf("%w: more than 5 redirects", ErrRefused)
		}
		return p.checkURL(req.URL)
	}}
}
