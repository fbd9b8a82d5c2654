package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// The files of a task reach the sandboxed program as files of its own:
// the worker's copies (the attachments' paths in the JSON input) are on
// the node, where the sandbox cannot look (its own uid, its own /tmp, the
// node's directories inaccessible). The relay, which runs as the node,
// reads each attachment's file and sends its bytes ahead of the task; the
// sandbox's side writes them into a directory of its own (under its
// TMPDIR: the unit's private /tmp), gives the program the task with each
// attachment's path pointing there (a file not sent: no path at all, never
// a node's), and removes the directory once the program has exited.
//
// On the connection, a relay that sends files opens with execFilesMagic,
// then frames as the other way's: 'f' a file (the attachment's index, 4
// bytes; its size, 8 bytes; its base name), then 'd' frames of its bytes,
// then 'i' frames of the task itself (the relay's stdin), and the
// half-close. A connection without the magic is the task alone, as sent
// by a relay of before.

const execFilesMagic = "botctl-exec-sandbox files/1\n"

// maxExecFile bounds one attachment's size as announced (the node's are
// bounded by media.max_bytes).
const maxExecFile = 1 << 30

// execAttachments is the part of the exec backend's JSON input that names
// files (ai.Request's attachments).
type execAttachments struct {
	Attachments []struct {
		Name string `json:"name"`
		Path string `json:"path"`
	} `json:"attachments"`
}

// sendTask sends the task in (read whole) to the sandbox on conn: the
// files its attachments name first, then the task.
func sendTask(conn io.Writer, in io.Reader) error {
	raw, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(conn, execFilesMagic); err != nil {
		return err
	}
	var mu sync.Mutex
	var task execAttachments
	if json.Unmarshal(raw, &task) == nil {
		for i, a := range task.Attachments {
			if a.Path == "" {
				continue
			}
			if err := sendFile(conn, &mu, i, a.Path); err != nil {
				return err
			}
		}
	}
	_, err = frameWriter{mu: &mu, out: conn, typ: 'i'}.Write(raw)
	return err
}

// sendFile sends the file at path as attachment i. A file that cannot be
// opened is not sent (the program sees the attachment without a path);
// one that fails midway fails the task.
func sendFile(conn io.Writer, mu *sync.Mutex, i int, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil
	}
	head := binary.BigEndian.AppendUint32(nil, uint32(i))
	head = binary.BigEndian.AppendUint64(head, uint64(st.Size()))
	head = append(head, filepath.Base(path)...)
	if err := (frameWriter{mu: mu, out: conn, typ: 'f'}).frame(head); err != nil {
		return err
	}
	n, err := io.Copy(frameWriter{mu: mu, out: conn, typ: 'd'}, io.LimitReader(f, st.Size()))
	if err == nil && n != st.Size() {
		err = fmt.Errorf("attachment %d (%s): %d bytes of %d read", i, path, n, st.Size())
	}
	return err
}

// receiveTask reads a relay's task off in: the task to give the program,
// and the directory its files were written to ("" when none; the caller
// removes it).
func receiveTask(in io.Reader) (task io.Reader, dir string, err error) {
	br := bufio.NewReader(in)
	if head, _ := br.Peek(len(execFilesMagic)); string(head) != execFilesMagic {
		return br, "", nil // the task alone
	}
	br.Discard(len(execFilesMagic))
	files := map[int]string{}
	var stdin bytes.Buffer
	var cur *os.File
	var left int64
	fail := func(format string, args ...any) (io.Reader, string, error) {
		if cur != nil {
			cur.Close()
		}
		return nil, dir, fmt.Errorf("exec sandbox: "+format, args...)
	}
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fail("the task ended midway: %v", err)
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > maxExecFrame {
			return fail("a frame of %d bytes", n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			return fail("the task ended midway: %v", err)
		}
		switch hdr[0] {
		case 'f':
			if left != 0 || len(body) < 12 {
				return fail("a file frame out of turn")
			}
			if cur != nil {
				cur.Close()
			}
			i, size := int(binary.BigEndian.Uint32(body)), int64(binary.BigEndian.Uint64(body[4:]))
			if size > maxExecFile {
				return fail("attachment %d of %d bytes", i, size)
			}
			if dir == "" {
				if dir, err = os.MkdirTemp("", "botctl-exec-files-"); err != nil {
					return fail("%v", err)
				}
			}
			path := filepath.Join(dir, fmt.Sprintf("%d-%s", i, execFileName(string(body[12:]))))
			if cur, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
				return fail("%v", err)
			}
			files[i], left = path, size
		case 'd':
			if cur == nil || int64(n) > left {
				return fail("file bytes out of turn")
			}
			if _, err := cur.Write(body); err != nil {
				return fail("%v", err)
			}
			left -= int64(n)
		case 'i':
			stdin.Write(body)
		default:
			return fail("unknown frame %q", hdr[0])
		}
	}
	if left != 0 {
		return fail("a file ended %d bytes short", left)
	}
	if cur != nil {
		if err := cur.Close(); err != nil {
			return fail("%v", err)
		}
	}
	return bytes.NewReader(withPaths(stdin.Bytes(), files)), dir, nil
}

// execFileName is a file's base name fit for the sandbox's directory.
func execFileName(name string) string {
	name = filepath.Base(strings.ReplaceAll(name, "\\", "/"))
	if name == "." || name == ".." || name == "/" || name == "" {
		return "file"
	}
	return name
}

// withPaths is the JSON task raw with each attachment's path the file
// received for it (files, by index), or none; raw as it is when it names
// no attachments.
func withPaths(raw []byte, files map[int]string) []byte {
	var task map[string]json.RawMessage
	if json.Unmarshal(raw, &task) != nil || task["attachments"] == nil {
		return raw
	}
	var atts []map[string]json.RawMessage
	if json.Unmarshal(task["attachments"], &atts) != nil {
		return raw
	}
	for i, a := range atts {
		if p, ok := files[i]; ok {
			a["path"], _ = json.Marshal(p)
		} else {
			delete(a, "path")
		}
	}
	task["attachments"], _ = json.Marshal(atts)
	out, err := json.Marshal(task)
	if err != nil {
		return raw
	}
	return out
}
