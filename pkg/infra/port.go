package infra

import (
	"fmt"
	"net"
)

// FreeAddr returns "127.0.0.1:P" for a TCP port that was free a moment ago.
// The port is released before FreeAddr returns, so another process may take
// it first; it is meant for tests and for servers (such as embedded etcd)
// that cannot listen on port 0 and report the port they got.
func FreeAddr() (string, error) { return freeAddrHost("127.0.0.1") }

func freeAddrHost(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	return addr, nil
}

// FreePort is FreeAddr's port number.
func FreePort() (int, error) {
	addr, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	var port int
	_, err = fmt.Sscan(p, &port)
	return port, err
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
