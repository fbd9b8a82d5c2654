package infra

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreeAddr returns "127.0.0.1:P" for a TCP port that was free a moment ago,
// for tests and their harnesses: servers (such as embedded etcd, or a
// NATS cluster's routes) that cannot listen on port 0 and report the port
// they got. The port is released before FreeAddr returns.
//
// P is drawn at random from below the kernel's ephemeral range (see
// FreeAddrs), so neither an outgoing connection nor another listener on
// port 0 can be given it between FreeAddr's close and the caller's bind;
// only another process picking the same port at random in that moment
// can take it. Callers that can start again on EADDRINUSE should.
//
// Not for a production listener: below the ephemeral range are the
// registered ports other services on the machine may be configured to
// use (StartEtcdOnFreePorts takes its ports from the ephemeral range and
// retries instead).
func FreeAddr() (string, error) {
	addrs, err := freeAddrs("127.0.0.1", 1)
	if err != nil {
		return "", err
	}
	return addrs[0], nil
}

// FreeAddrs returns n distinct "127.0.0.1:P" addresses, as FreeAddr: each
// is held open until all are found, so no two are the same.
//
// The ports come from [minPickedPort, the ephemeral range's start): the
// kernel hands out its ephemeral ports (net.ipv4.ip_local_port_range,
// 32768–60999 by default on Linux) to listen(":0") and to the source
// port of every outgoing connection, so a port found there with ":0" and
// closed was seen taken by a test's own client connections before the
// server meant for it could bind (a CI failure). Below that range, ports
// go only to whoever asks for them by number. If the range leaves too
// few ports below it, ":0" is used.
func FreeAddrs(n int) ([]string, error) { return freeAddrs("127.0.0.1", n) }

// minPickedPort is the lowest port FreeAddrs picks: above the ports
// well-known and registered services usually listen on.
const minPickedPort = 10000

func freeAddrs(host string, n int) ([]string, error) {
	hi := ephemeralStart()
	return holdAddrs(n, func() (net.Listener, error) { return listenFree(host, hi) })
}

// holdAddrs returns the addresses of n listeners listen opens, each held
// until all are open, so that no two are the same.
func holdAddrs(n int, listen func() (net.Listener, error)) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	out := make([]string, 0, n)
	for len(out) < n {
		l, err := listen()
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// listenFree listens on a random free port in [minPickedPort, hi), or on
// port 0 when that range is small or every try found its port taken.
func listenFree(host string, hi int) (net.Listener, error) {
	if hi-minPickedPort >= 1000 {
		for range 64 {
			p := minPickedPort + rand.IntN(hi-minPickedPort)
			if l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p))); err == nil {
				return l, nil
			}
		}
	}
	return net.Listen("tcp", net.JoinHostPort(host, "0"))
}

// ephemeralAddrs returns n distinct free ports on host from the kernel's
// ephemeral range (listen on port 0), each held until all are found.
func ephemeralAddrs(host string, n int) ([]string, error) {
	return holdAddrs(n, func() (net.Listener, error) { return net.Listen("tcp", net.JoinHostPort(host, "0")) })
}

// ephemeralStart is the first port of the kernel's ephemeral range:
// Linux's, or 32768 where it cannot be read (other systems' ranges start
// there or higher).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 0 || lo > 65535 {
		return 32768
	}
	return lo
}

// FreePort is FreeAddr's port number.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreePorts is FreeAddrs' port numbers.
func FreePorts(n int) ([]int, error) {
	addrs, err := FreeAddrs(n)
	if err != nil {
		return nil, err
	}
	ports := make([]int, n)
	for i, a := range addrs {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			return nil, err
		}
		if ports[i], err = strconv.Atoi(p); err != nil {
			return nil, err
		}
	}
	return ports, nil
}

// splitAddr checks that addr is "host:port" with a numeric port.
func splitAddr(addr string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	if _, err := fmt.Sscan(p, &port); err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number between 0 and 65535", p)
	}
	return host, port, nil
}
