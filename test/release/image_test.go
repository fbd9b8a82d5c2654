package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
)

var (
	imageOnce sync.Once
	imagePath string
	imageErr  error
	imageOut  string
)

// firstImage is one make image build, shared by the image tests.
func firstImage(t *testing.T) string {
	t.Helper()
	imageOnce.Do(func() {
		var dir string
		dir, imageErr = os.MkdirTemp("", "botctl-image")
		if imageErr == nil {
			cleanups = append(cleanups, dir)
			imageOut, imageErr = script(t, "image", dir, "--version", version)
			imagePath = filepath.Join(dir, "botctl_"+v+"_oci.tar")
		}
	})
	if imageErr != nil {
		t.Fatalf("release.sh image: %v\n%s", imageErr, imageOut)
	}
	return imagePath
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

type index struct {
	MediaType string       `json:"mediaType"`
	Manifests []descriptor `json:"manifests"`
}

type manifest struct {
	MediaType string       `json:"mediaType"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
}

type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		User       string              `json:"User"`
		Entrypoint []string            `json:"Entrypoint"`
		Volumes    map[string]struct{} `json:"Volumes"`
		Labels     map[string]string   `json:"Labels"`
	} `json:"config"`
}

// The OCI archive of make image, read as a runtime would: index.json names
// one multi-platform index; each architecture's image runs botctl as a
// non-root user, keeps /var/lib/botctl as a volume, carries the OCI
// labels, and its layer holds the static binary, that user in /etc/passwd
// owning /var/lib/botctl, and CA certificates. Every blob is the digest it
// is named by. A second build is the same bytes.
func TestImage(t *testing.T) {
	archive := firstImage(t)
	again := t.TempDir()
	if out, err := script(t, "image", again, "--version", version); err != nil {
		t.Fatalf("second release.sh image: %v\n%s", err, out)
	}
	a, _ := os.ReadFile(archive)
	b, _ := os.ReadFile(filepath.Join(again, "botctl_"+v+"_oci.tar"))
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Errorf("two image builds differ (%d and %d bytes)", len(a), len(b))
	}

	files := readTar(t, bytes.NewReader(a))
	if !strings.Contains(string(files["oci-layout"].body), `"imageLayoutVersion"`) {
		t.Errorf("no oci-layout file: %q", files["oci-layout"].body)
	}
	blob := func(d descriptor) []byte {
		t.Helper()
		alg, hexsum, _ := strings.Cut(d.Digest, ":")
		f, ok := files["blobs/"+alg+"/"+hexsum]
		if !ok {
			t.Fatalf("blob %s (%s) is not in the archive", d.Digest, d.MediaType)
		}
		sum := sha256.Sum256(f.body)
		if alg != "sha256" || hex.EncodeToString(sum[:]) != hexsum || int64(len(f.body)) != d.Size {
			t.Fatalf("blob %s is not what its descriptor says", d.Digest)
		}
		return f.body
	}
	var top index
	decode(t, "index.json", files["index.json"].body, &top)
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Fatalf("index.json: want one image index, got %+v", top.Manifests)
	}
	if ref := top.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; ref != "botctl:"+v {
		t.Errorf("index.json names the image %q, want botctl:%s", ref, v)
	}
	var platforms index
	decode(t, "the image index", blob(top.Manifests[0]), &platforms)
	var got []string
	for _, d := range platforms.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" {
			t.Fatalf("image index entry without a linux platform: %+v", d)
		}
		arch := d.Platform.Architecture
		got = append(got, arch)
		var m manifest
		decode(t, arch+" manifest", blob(d), &m)
		var cfg imageConfig
		decode(t, arch+" config", blob(m.Config), &cfg)
		checkImageConfig(t, arch, cfg)
		if len(m.Layers) != 1 {
			t.Fatalf("%s: %d layers, want the one this build makes", arch, len(m.Layers))
		}
		zr, err := gzip.NewReader(bytes.NewReader(blob(m.Layers[0])))
		if err != nil {
			t.Fatalf("%s layer: %v", arch, err)
		}
		checkRootfs(t, arch, cfg, readTar(t, zr))
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(arches())); !slices.Equal(got, want) {
		t.Errorf("the image is for %v, want %v", got, want)
	}
}

func checkImageConfig(t *testing.T, arch string, cfg imageConfig) {
	t.Helper()
	if cfg.OS != "linux" || cfg.Architecture != arch {
		t.Errorf("%s config is for %s/%s", arch, cfg.OS, cfg.Architecture)
	}
	user, _, _ := strings.Cut(cfg.Config.User, ":")
	if user == "" || user == "0" || user == "root" {
		t.Errorf("%s: the image runs as %q: root", arch, cfg.Config.User)
	}
	if len(cfg.Config.Entrypoint) != 1 || path.Base(cfg.Config.Entrypoint[0]) != "botctl" {
		t.Errorf("%s: entrypoint %v, want botctl", arch, cfg.Config.Entrypoint)
	}
	if _, ok := cfg.Config.Volumes["/var/lib/botctl"]; !ok {
		t.Errorf("%s: /var/lib/botctl is not a volume (%v)", arch, cfg.Config.Volumes)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  v,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.source":   "https://github.com/botctl/botctl",
	} {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("%s: label %s=%q, want %q", arch, k, got, want)
		}
	}
}

// checkRootfs: the layer has the entrypoint as a static binary for arch,
// the config's user in /etc/passwd, /var/lib/botctl owned by that user,
// and CA certificates.
func checkRootfs(t *testing.T, arch string, cfg imageConfig, files map[string]tarFile) {
	t.Helper()
	entry := strings.TrimPrefix(cfg.Config.Entrypoint[0], "/")
	bin, ok := files[entry]
	if !ok || bin.mode&0o111 == 0 {
		t.Fatalf("%s: the layer has no executable %s", arch, entry)
	}
	checkStatic(t, bin.body, arch)
	uid, _, _ := strings.Cut(cfg.Config.User, ":")
	if !regexp.MustCompile(`(?m)^botctl:x:` + regexp.QuoteMeta(uid) + `:`).Match(files["etc/passwd"].body) {
		t.Errorf("%s: /etc/passwd has no user botctl with uid %s:\n%s", arch, uid, files["etc/passwd"].body)
	}
	if d, ok := files["var/lib/botctl/"]; !ok || fmt.Sprint(d.uid) != uid {
		t.Errorf("%s: /var/lib/botctl is not in the layer or not owned by %s", arch, uid)
	}
	if len(files["etc/ssl/certs/ca-certificates.crt"].body) == 0 {
		t.Errorf("%s: no CA certificates", arch)
	}
}

type tarFile struct {
	body []byte
	mode int64
	uid  int
}

func readTar(t *testing.T, r io.Reader) map[string]tarFile {
	t.Helper()
	tr := tar.NewReader(r)
	files := map[string]tarFile{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimPrefix(h.Name, "./")] = tarFile{body: body, mode: h.Mode, uid: h.Uid}
	}
}

func decode(t *testing.T, what string, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, raw)
	}
}

// The image runs: podman loads the archive, botctl version prints the
// version, and botctl serve --demo in it answers a user of its simulator.
// Skipped without podman.
func TestImageRunsInPodman(t *testing.T) {
	podman, err := exec.LookPath("podman")
	if err != nil {
		t.Skip("no podman (apt-get install podman runc): the image is checked by its structure only (TestImage)")
	}
	if !slices.Contains(arches(), goarch()) {
		t.Skipf("no image is built for this machine's %s", goarch())
	}
	archive := firstImage(t)
	out := mustRun(t, podman, "load", "-i", archive)
	m := regexp.MustCompile(`Loaded image(?:\(s\))?: (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("podman load named no image:\n%s", out)
	}
	name := m[1]
	t.Cleanup(func() { run(t, podman, "rmi", "-f", name) })

	out = mustRun(t, podman, append(append([]string{"run", "--rm"}, podmanFlags()...), name, "version")...)
	if !strings.HasPrefix(out, "botctl "+v+" (commit ") {
		t.Errorf("botctl version in the image: %q", out)
	}

	api, sim := freeAddr(t), freeAddr(t)
	ctr := fmt.Sprintf("botctl-release-test-%d", os.Getpid())
	args := append([]string{"run", "-d", "--name", ctr, "--network", "host"}, podmanFlags()...)
	mustRun(t, podman, append(args, name, "serve", "--demo", "--data-dir", "/var/lib/botctl", "--listen", api, "--demo-listen", sim)...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := run(t, podman, "logs", ctr)
			t.Logf("container logs:\n%s", logs)
		}
		run(t, podman, "rm", "-f", "-v", ctr)
	})
	testwait.NoError(t, 3*time.Minute, time.Second, "the simulator in the container accepts a user's message", func() error {
		resp, err := http.Post("http://"+sim+"/control/messages", "application/json",
			strings.NewReader(`{"bot_id":"demo","user_id":"alice","text":"hello"}`))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), `"delivered":true`) {
			return fmt.Errorf("%s: %s", resp.Status, body)
		}
		return nil
	})
	testwait.NoError(t, 3*time.Minute, time.Second, "the node in the container answers", func() error {
		resp, err := http.Get("http://" + sim + "/control/transcript?bot_id=demo&chat=alice")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var tr struct {
			Messages []struct {
				From    string `json:"from"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&tr); err != nil {
			return err
		}
		for _, m := range tr.Messages {
			if m.From == "bot" && strings.Contains(m.Content, "hello") {
				return nil
			}
		}
		return fmt.Errorf("no answer yet: %+v", tr.Messages)
	})
}

// podmanFlags are what podman needs on a machine like CI's: runc where
// it is installed (crun refuses cgroup v1 "hybrid" hosts), and explicit
// limits (podman otherwise raises RLIMIT_NOFILE and RLIMIT_NPROC to the
// maximum, which a root without CAP_SYS_RESOURCE may not do).
func podmanFlags() []string {
	flags := []string{"--ulimit", "nofile=16384:16384", "--ulimit", "nproc=4096:4096"}
	if _, err := exec.LookPath("runc"); err == nil {
		flags = append(flags, "--runtime", "runc")
	}
	return flags
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
