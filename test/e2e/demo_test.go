package e2e

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	goimage "image"
	pngenc "image/png"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
)

// The README's first command: `botctl serve --demo` prints the demo page's
// address, and through the page's API a user's question gets its answer.
func TestServeDemoPrintsThePage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("e2e: skipped in -short mode")
	}
	cmd := exec.Command(bin, "serve", "--demo", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--demo-listen", "127.0.0.1:0",
		"--demo-answer-time", "1s")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve --demo after SIGTERM: %v", err)
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Error("serve --demo did not stop within 60 s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("stderr:\n%s", tail(stderr.String(), 40))
		}
	})
	pageURL := make(chan [2]string, 1)
	go func() {
		// The link opens as printed: the token the node generated is in
		// its fragment.
		re := regexp.MustCompile(`open (http://127\.0\.0\.1:\d+/demo/)#token=([0-9a-f]+) `)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case pageURL <- [2]string{m[1], m[2]}:
				default:
				}
			}
		}
		io.Copy(io.Discard, out) // a line too long for the scanner: keep draining
		done <- cmd.Wait()
	}()
	var page, token string
	select {
	case p := <-pageURL:
		page, token = p[0], p[1]
	case <-time.After(60 * time.Second):
		t.Fatal("serve --demo printed no \"open http://…/demo/#token=TOKEN \" line within 60 s")
	}
	call := func(method, path, body string) (*http.Response, error) {
		req, err := http.NewRequest(method, page+path, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		return http.DefaultClient.Do(req)
	}

	get := func(path string, v any) error {
		resp, err := call(http.MethodGet, path, "")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		if v == nil {
			return nil
		}
		return json.NewDecoder(resp.Body).Decode(v)
	}
	if err := get("", nil); err != nil {
		t.Fatal(err)
	}
	resp, err := call(http.MethodPost, "api/messages", `{"bot":"demo","user":"alice","text":"hello from the page"}`)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("post a message through the page: %s", resp.Status)
	}
	testwait.NoError(t, 60*time.Second, testwait.Every, "the answer in the page's transcript", func() error {
		var tr struct {
			Messages []struct {
				From, Content string
				Finished      bool
			}
		}
		if err := get("api/transcript?bot=demo&chat=alice", &tr); err != nil {
			return err
		}
		for _, m := range tr.Messages {
			// A message posted before the node subscribed is missed and
			// found by the backfill: its answer is pushed late, after a note.
			if m.From == "bot" && m.Finished && strings.Contains(m.Content, "You asked: hello from the page") {
				return nil
			}
		}
		return fmt.Errorf("not answered yet: %+v", tr.Messages)
	})

	// An image, and a mixed message (text and an image), through the
	// page: the simulator serves each encrypted, the leader downloads and
	// decrypts it, and the demo answer names it.
	var png bytes.Buffer
	if err := pngenc.Encode(&png, goimage.NewRGBA(goimage.Rect(0, 0, 20, 10))); err != nil {
		t.Fatal(err)
	}
	img := base64.StdEncoding.EncodeToString(png.Bytes())
	for _, c := range []struct{ user, body, want string }{
		{"bob", `{"bot":"demo","user":"bob","image":{"base64":"` + img + `","filename":"cat.png"}}`,
			fmt.Sprintf("You sent 1 file:\n- image cat.png: image/png, %d bytes, 20×10 pixels\n", png.Len())},
		{"carol", `{"bot":"demo","user":"carol","text":"what is it?","image":{"base64":"` + img + `"}}`,
			fmt.Sprintf("You sent 1 file:\n- image image.png: image/png, %d bytes, 20×10 pixels\nYou asked: what is it?", png.Len())},
	} {
		resp, err := call(http.MethodPost, "api/messages", c.body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("post %s's image through the page: %s", c.user, resp.Status)
		}
		testwait.NoError(t, 60*time.Second, testwait.Every, c.user+"'s answer naming the image", func() error {
			var tr struct {
				Messages []struct {
					From, Content string
					Finished      bool
				}
			}
			if err := get("api/transcript?bot=demo&chat="+c.user, &tr); err != nil {
				return err
			}
			for _, m := range tr.Messages {
				if m.From == "bot" && m.Finished && strings.Contains(m.Content, c.want) {
					return nil
				}
			}
			return fmt.Errorf("not answered yet: %+v", tr.Messages)
		})
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
