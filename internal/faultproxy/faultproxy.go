// Package faultproxy is a TCP proxy for tests that can cut or stall the
// connections it forwards, to simulate network faults between a botctl node
// and etcd, NATS or WeCom without touching the host's network.
//
// Faults:
//   - Blackhole: connections stay open but no byte moves in either direction,
//     like a partition where packets are dropped and TCP keeps retrying. New
//     connections are accepted but not forwarded. Heal resumes forwarding;
//     bytes read just before the blackhole are delivered then, as TCP would
//     deliver retransmitted segments.
//   - CutAll: every current connection is closed at once (both sides see a
//     reset or EOF); new connections are forwarded as usual.
//
// WithClientFilter has a proxy rewrite what clients send, to fail one part of
// a protocol while the rest keeps working (internal/testenv's BucketFault
// drops one NATS bucket's publishes this way).
//
// Close stops the proxy and waits for all of its goroutines.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
)

// Proxy forwards every connection accepted on its listen address to one
// target address.
type Proxy struct {
	ln     net.Listener
	target string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// clientFilter makes each connection's filter of its client's bytes;
	// nil forwards them untouched.
	clientFilter func() func(p []byte) []byte

	mu sync.Mutex
	// flowing is closed while bytes are forwarded; while blackholed it is
	// an open channel that Heal closes.
	flowing    chan struct{}
	blackholed bool
	links      map[*link]struct{}
	closed     bool
}

// link is one proxied connection: the accepted client side and, once
// dialed, the target side.
type link struct {
	client net.Conn
	once   sync.Once
	ctx    context.Context // done when the link is closed
	cancel context.CancelFunc

	mu     sync.Mutex
	server net.Conn
}

// Option configures a Proxy made by New.
type Option func(*Proxy)

// WithClientFilter passes every connection's bytes from its client through a
// filter before they reach the target: newFilter makes one for each
// connection, and the filter returns what to forward of the bytes just read
// (possibly none, possibly held bytes from earlier reads). A filter is called
// by one goroutine at a time, in the order the bytes arrived, so it may keep
// state across reads (a protocol parser's), and the slice it returns may be
// its own buffer, reused once the bytes are written. Bytes from the target
// are forwarded untouched.
func WithClientFilter(newFilter func() func(p []byte) []byte) Option {
	return func(p *Proxy) { p.clientFilter = newFilter }
}

// New listens on listenAddr ("127.0.0.1:0" picks a free port; see Addr) and
// forwards to targetAddr.
func New(listenAddr, targetAddr string, opts ...Option) (*Proxy, error) {
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen %s: %w", listenAddr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	flowing := make(chan struct{})
	close(flowing)
	p := &Proxy{ln: ln, target: targetAddr, ctx: ctx, cancel: cancel, flowing: flowing, links: map[*link]struct{}{}}
	for _, o := range opts {
		o(p)
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on ("127.0.0.1:P").
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole stops forwarding bytes in both directions on every connection,
// current and future, until Heal. Connections stay open.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.blackholed {
		p.blackholed = true
		p.flowing = make(chan struct{})
	}
}

// Heal resumes forwarding after Blackhole.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blackholed {
		p.blackholed = false
		close(p.flowing)
	}
}

// CutAll closes every current connection, both sides. The proxy keeps
// accepting new ones.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Conns is the number of connections currently open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops listening, closes every connection and waits until all of the
// proxy's goroutines have returned. Safe to call twice.
func (p *Proxy) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	var err error
	if !already {
		p.cancel()
		err = p.ln.Close()
		p.CutAll()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary accept errors (EMFILE): keep serving.
			if p.ctx.Err() != nil {
				return
			}
			continue
		}
		ctx, cancel := context.WithCancel(p.ctx)
		l := &link{client: c, ctx: ctx, cancel: cancel}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	if !p.waitFlowing(l) {
		return
	}
	var d net.Dialer
	s, err := d.DialContext(l.ctx, "tcp", p.target)
	if err != nil {
		return
	}
	l.mu.Lock()
	l.server = s
	l.mu.Unlock()
	select {
	case <-l.ctx.Done(): // cut while dialing: close() did not see s
		s.Close()
		return
	default:
	}
	var filter func([]byte) []byte
	if p.clientFilter != nil {
		filter = p.clientFilter()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, s, l.client, filter) }()
	go func() { defer wg.Done(); p.pipe(l, l.client, s, nil) }()
	wg.Wait()
}

// pipe copies src to dst while the proxy is not blackholed, through filter
// if it is not nil. Any error ends the whole link.
func (p *Proxy) pipe(l *link, dst, src net.Conn, filter func([]byte) []byte) {
	defer l.close()
	buf := make([]byte, 32*1024)
	for {
		if !p.waitFlowing(l) {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			// A blackhole that started during Read holds these bytes.
			if !p.waitFlowing(l) {
				return
			}
			out := buf[:n]
			if filter != nil {
				out = filter(out)
			}
			if len(out) > 0 {
				if _, werr := dst.Write(out); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// waitFlowing blocks while the proxy is blackholed; false if the link ended.
func (p *Proxy) waitFlowing(l *link) bool {
	p.mu.Lock()
	flowing := p.flowing
	p.mu.Unlock()
	select {
	case <-flowing:
		return true
	case <-l.ctx.Done():
		return false
	}
}

func (l *link) close() {
	l.once.Do(func() {
		l.cancel()
		l.client.Close()
		l.mu.Lock()
		if l.server != nil {
			l.server.Close()
		}
		l.mu.Unlock()
	})
}
