package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
)

// `botctl exec-sandbox` runs the exec AI backend's program in a systemd
// unit of its own (deploy/botctl-exec.socket, botctl-exec@.service): a
// uid of its own (DynamicUser), a read-only system, no view of the node's
// data dir or credentials, and no network (or none to this machine's
// loopback, where the node API, etcd and NATS listen). The node's
// ai.exec.command is `botctl exec-sandbox relay SOCKET`; the socket's
// service runs `botctl exec-sandbox serve -- PROGRAM ARGS…` on each
// connection, with the connection as its stdin and stdout.
//
// On the connection: the relay sends the task (its stdin), the files it
// names ahead of it (execsandboxfiles.go), and half-closes; serve gives
// it to the program's stdin and sends back frames, a type byte
// and a big-endian uint32 length then the bytes: 'o' stdout, 'e' stderr,
// and last 'x' with the program's exit status (4 bytes). The relay writes
// them out as they come and exits with that status, so that the backend's
// contract (stdout streamed, exit 0 means complete) holds through the
// sandbox. A connection that ends without 'x' is a failure.
func newExecSandboxCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "exec-sandbox",
		Short: "Run the exec AI backend's program in a sandboxed systemd unit (see docs/security.md)",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "relay SOCKET",
		Short: "ai.exec.command side: send stdin to the sandbox at SOCKET, stream back its output and exit status",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := relayExec(cmd.Context(), args[0], os.Stdin, os.Stdout, os.Stderr)
			if err != nil {
				return err
			}
			os.Exit(code)
			return nil
		},
	}, &cobra.Command{
		Use:   "serve -- PROGRAM [ARGS…]",
		Short: "Sandboxed unit's side: run PROGRAM on the connection that is stdin and stdout",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return serveExec(cmd.Context(), args, os.Stdin, os.Stdout)
		},
	})
	return cmd
}

const maxExecFrame = 1 << 20

// relayExec sends in to the sandbox at socket and writes what its program
// prints to stdout and stderr; it returns the program's exit status.
func relayExec(ctx context.Context, socket string, in io.Reader, stdout, stderr io.Writer) (int, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return 0, fmt.Errorf("exec sandbox %s: %w (is botctl-exec.socket running? systemctl status botctl-exec.socket)", socket, err)
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	go func() {
		if err := sendTask(conn, in); err != nil {
			conn.Close() // the sandbox sees a task cut short: no answer
			return
		}
		conn.CloseWrite()
	}()
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return 0, fmt.Errorf("exec sandbox %s: the connection ended without the program's exit status: %w", socket, err)
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > maxExecFrame {
			return 0, fmt.Errorf("exec sandbox %s: a frame of %d bytes: not botctl exec-sandbox serve on the other side?", socket, n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(conn, body); err != nil {
			return 0, fmt.Errorf("exec sandbox %s: %w", socket, err)
		}
		switch hdr[0] {
		case 'o':
			if _, err := stdout.Write(body); err != nil {
				return 0, err
			}
		case 'e':
			stderr.Write(body)
		case 'x':
			if n != 4 {
				return 0, fmt.Errorf("exec sandbox %s: exit frame of %d bytes", socket, n)
			}
			return int(int32(binary.BigEndian.Uint32(body))), nil
		default:
			return 0, fmt.Errorf("exec sandbox %s: unknown frame %q", socket, hdr[0])
		}
	}
}

// frameWriter writes frames of one type to a shared connection.
type frameWriter struct {
	mu  *sync.Mutex
	out io.Writer
	typ byte
}

func (f frameWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 { // a pipe read is at most a few pages; bounded anyway
		chunk := p[:min(len(p), maxExecFrame)]
		if err := f.frame(chunk); err != nil {
			return 0, err
		}
		p = p[len(chunk):]
	}
	return n, nil
}

func (f frameWriter) frame(b []byte) error {
	var hdr [5]byte
	hdr[0] = f.typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(b)))
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.out.Write(hdr[:]); err != nil {
		return err
	}
	_, err := f.out.Write(b)
	return err
}

// serveExec runs argv with in as its stdin and sends its output and exit
// status to out as frames. A connection that breaks (the node gave up on
// the answer) kills the program.
func serveExec(ctx context.Context, argv []string, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	task, dir, err := receiveTask(in)
	if dir != "" {
		defer os.RemoveAll(dir)
	}
	if err != nil {
		// Not run: the relay's answer fails, saying why.
		frameWriter{mu: &mu, out: out, typ: 'e'}.Write([]byte("botctl " + err.Error() + "\n"))
		var status [4]byte
		binary.BigEndian.PutUint32(status[:], 127)
		return frameWriter{mu: &mu, out: out, typ: 'x'}.frame(status[:])
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = task
	cmd.Stdout = killOnError{frameWriter{mu: &mu, out: out, typ: 'o'}, cancel}
	cmd.Stderr = killOnError{frameWriter{mu: &mu, out: out, typ: 'e'}, cancel}
	code := 0
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	case err != nil:
		frameWriter{mu: &mu, out: out, typ: 'e'}.Write([]byte("botctl exec-sandbox: " + err.Error() + "\n"))
		code = 127
	}
	var status [4]byte
	binary.BigEndian.PutUint32(status[:], uint32(int32(code)))
	return frameWriter{mu: &mu, out: out, typ: 'x'}.frame(status[:])
}

// killOnError ends the program when its output cannot be sent.
type killOnError struct {
	w    io.Writer
	kill context.CancelFunc
}

func (k killOnError) Write(p []byte) (int, error) {
	n, err := k.w.Write(p)
	if err != nil {
		k.kill()
	}
	return n, err
}
