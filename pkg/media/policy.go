package media

import (
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
// points a download inside the node's network); an item without an
// aeskey is refused. With Hosts, only those hosts are fetched from,
// redirects included. What is not guaranteed: WeCom does not document the
// hosts its media URLs use, so Hosts is empty (any public host) unless
// the operator sets it (media.allowed_hosts).
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
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range p.Hosts {
		h = strings.ToLower(h)
		if host == strings.TrimPrefix(h, ".") || strings.HasPrefix(h, ".") && strings.HasSuffix(host, h) {
			return true
		}
	}
	return false
}

// publicAddr reports whether a is an address a Strict policy dials.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsValid() && !a.IsLoopback() && !a.IsPrivate() && !a.IsLinkLocalUnicast() && !a.IsLinkLocalMulticast() &&
		!a.IsInterfaceLocalMulticast() && !a.IsMulticast() && !a.IsUnspecified() &&
		!netip.MustParsePrefix("100.64.0.0/10").Contains(a) // carrier-grade NAT, shared address space
}

// control refuses a dial to an address that is not public (Strict).
func (p Policy) control(_, address string, _ syscall.RawConn) error {
	if !p.Strict {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !publicAddr(ap.Addr()) {
		return fmt.Errorf("%w: address %s is not public", ErrRefused, address)
	}
	return nil
}

// client is the http.Client a Fetcher with this policy downloads with:
// dials checked by control, redirects by checkURL (at most 5).
func (p Policy) client() *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: p.control}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // a proxy would dial on our behalf, past control
	t.DialContext = d.DialContext
	return &http.Client{Transport: t, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return fmt.Errorf("%w: more than 5 redirects", ErrRefused)
		}
		return p.checkURL(req.URL)
	}}
}
