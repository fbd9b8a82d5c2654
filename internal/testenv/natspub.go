package testenv

import (
	"bytes"
	"strconv"
	"strings"
)

// maxPubLine bounds a protocol line the filter holds while it waits for the
// line's end. nats-server refuses lines past its max_control_line (4 KiB by
// default) long before this; a longer one is no protocol the filter knows,
// and it then passes everything through for the server to refuse.
const maxPubLine = 1 << 20

// pubFilter follows the client-to-server side of one NATS connection and
// drops the PUB and HPUB frames whose subject drop reports, each frame
// whole (its line and its payload), as if the client had never sent them.
// Every other line (CONNECT, SUB, UNSUB, PING, PONG) and every frame drop
// does not report passes byte for byte. The frames:
//
//	PUB <subject> [reply-to] <#bytes>\r\n<payload>\r\n
//	HPUB <subject> [reply-to] <#header bytes> <#total bytes>\r\n<headers and payload>\r\n
//
// drop is asked once per frame, when its line is complete, so a frame is
// kept or dropped whole however its bytes are split across reads. The
// server never learns of a dropped frame: a client in verbose mode (nats.go
// is not, by default) misses its +OK.
type pubFilter struct {
	drop func(subject string) bool

	line     []byte // the line read so far, until its '\n'
	payload  int    // bytes of the current frame's payload and its \r\n still to come
	dropping bool   // the current frame is dropped
	raw      bool   // a line past maxPubLine: no protocol; everything passes
	out      []byte
}

// filter returns what to forward of p: the bytes of kept frames and lines
// that p completes or continues. The slice is reused by the next call.
func (f *pubFilter) filter(p []byte) []byte {
	f.out = f.out[:0]
	for len(p) > 0 {
		switch {
		case f.raw:
			f.out = append(f.out, p...)
			p = nil
		case f.payload > 0:
			n := min(f.payload, len(p))
			if !f.dropping {
				f.out = append(f.out, p[:n]...)
			}
			f.payload -= n
			p = p[n:]
		default:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				f.line = append(f.line, p...)
				p = nil
				if len(f.line) > maxPubLine {
					f.out = append(f.out, f.line...)
					f.line, f.raw = nil, true
				}
				continue
			}
			f.line = append(f.line, p[:i+1]...)
			p = p[i+1:]
			f.endLine()
		}
	}
	return f.out
}

// endLine decides the fate of the complete line in f.line: a PUB or HPUB
// starts a payload, kept or dropped with its line; any other line passes.
func (f *pubFilter) endLine() {
	line := f.line
	f.line = f.line[:0]
	subject, size, ok := pubArgs(line)
	if !ok {
		f.out = append(f.out, line...)
		return
	}
	f.payload = size + len("\r\n")
	f.dropping = f.drop(subject)
	if !f.dropping {
		f.out = append(f.out, line...)
	}
}

// pubArgs reads a PUB or HPUB line: its subject and the payload's size
// (for HPUB the total, headers included). ok is false for any other line,
// and for a malformed PUB, which then passes for the server to refuse.
func pubArgs(line []byte) (subject string, size int, ok bool) {
	args := strings.Fields(string(line)) // the server splits on spaces and tabs; \r\n is space
	if len(args) == 0 {
		return "", 0, false
	}
	switch op := strings.ToUpper(args[0]); {
	case op == "PUB" && (len(args) == 3 || len(args) == 4):
	case op == "HPUB" && (len(args) == 4 || len(args) == 5):
	default:
		return "", 0, false
	}
	size, err := strconv.Atoi(args[len(args)-1])
	if err != nil || size < 0 {
		return "", 0, false
	}
	return args[1], size, true
}
