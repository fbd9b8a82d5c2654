// Command ociimage writes botctl's container image as an OCI image layout
// archive, without a daemon and without pulling anything: the image is
// one layer made here from files the build already has (the static
// binary, CA certificates from the build machine, the license texts) on
// an empty base. scripts/release.sh image runs it; make image is the
// front door.
//
// The image, per --binary architecture, under one multi-platform index:
//   - /usr/bin/botctl, the entrypoint; Cmd serve --config /etc/botctl/botctl.yaml
//   - the user botctl, uid and gid 65532 (not root), in /etc/passwd and /etc/group
//   - /var/lib/botctl, owned by botctl (0700), a volume and the working directory
//   - /etc/ssl/certs/ca-certificates.crt, /tmp (1777)
//   - /usr/share/doc/botctl/LICENSE and THIRD_PARTY_NOTICES.md
//   - labels (and manifest annotations) org.opencontainers.image.version,
//     .revision, .created, .source, .licenses, .title, .description
//
// The layout names the image botctl:<version> (podman load makes it
// localhost/botctl:<version>). Every time in it is --epoch (the commit's
// time), so two runs with the same inputs write the same bytes.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's non-root user (distroless's "nonroot" uid).
const uid = 65532

type binaries map[string]string

func (b binaries) String() string { return fmt.Sprint(map[string]string(b)) }

func (b binaries) Set(v string) error {
	arch, path, ok := strings.Cut(v, "=")
	if !ok || arch == "" || path == "" {
		return fmt.Errorf("--binary %q: want ARCH=PATH, e.g. amd64=bin/botctl", v)
	}
	b[arch] = path
	return nil
}

type options struct {
	version, commit, source   string
	epoch                     int64
	caCerts, license, notices string
	out                       string
	binaries                  binaries
}

func main() {
	o := options{binaries: binaries{}}
	flag.StringVar(&o.version, "version", "", "the release version, v0.5.0")
	flag.StringVar(&o.commit, "commit", "", "the full commit hash")
	flag.StringVar(&o.source, "source", "https://github.com/botctl/botctl", "the source repository's URL")
	flag.Int64Var(&o.epoch, "epoch", -1, "every timestamp, in Unix seconds (the commit's time)")
	flag.StringVar(&o.caCerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle to ship")
	flag.StringVar(&o.license, "license", "LICENSE", "botctl's license text")
	flag.StringVar(&o.notices, "notices", "THIRD_PARTY_NOTICES.md", "the third-party notices")
	flag.StringVar(&o.out, "out", "", "the OCI image layout archive to write (.tar)")
	flag.Var(o.binaries, "binary", "ARCH=PATH of a static linux binary (repeatable)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	switch {
	case o.version == "":
		return errors.New("--version is required (v0.5.0)")
	case o.commit == "":
		return errors.New("--commit is required (git rev-parse HEAD)")
	case o.epoch < 0:
		return errors.New("--epoch is required (git log -1 --format=%ct)")
	case o.out == "":
		return errors.New("--out is required (dist/botctl_0.5.0_oci.tar)")
	case len(o.binaries) == 0:
		return errors.New("--binary ARCH=PATH is required at least once")
	}
	at := time.Unix(o.epoch, 0).UTC()
	version := strings.TrimPrefix(o.version, "v")
	labels := map[string]string{
		"org.opencontainers.image.title":       "botctl",
		"org.opencontainers.image.description": "Keeps WeCom AI bots answering through crashes and faults",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    o.commit,
		"org.opencontainers.image.created":     at.Format(time.RFC3339),
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	archs := make([]string, 0, len(o.binaries))
	for a := range o.binaries {
		archs = append(archs, a)
	}
	sort.Strings(archs)
	for _, arch := range archs {
		img, err := image(o, arch, at, labels)
		if err != nil {
			return fmt.Errorf("%s image: %w", arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)

	dir, err := os.MkdirTemp("", "ociimage")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": "botctl:" + version,
	})); err != nil {
		return err
	}
	return archive(dir, o.out, at)
}

// image is one architecture's image: the layer on an empty OCI base, its
// config, and the labels as manifest annotations too.
func image(o options, arch string, at time.Time, labels map[string]string) (v1.Image, error) {
	layer, err := rootfs(o, arch, at)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: at}, CreatedBy: "scripts/ociimage: botctl " + o.version},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: at}
	cf.Config.User = fmt.Sprintf("%d:%d", uid, uid)
	cf.Config.Entrypoint = []string{"/usr/bin/botctl"}
	cf.Config.Cmd = []string{"serve", "--config", "/etc/botctl/botctl.yaml"}
	cf.Config.Env = []string{"PATH=/usr/bin:/bin", "HOME=/var/lib/botctl"}
	cf.Config.WorkingDir = "/var/lib/botctl"
	cf.Config.Volumes = map[string]struct{}{"/var/lib/botctl": {}}
	cf.Config.ExposedPorts = map[string]struct{}{"8391/tcp": {}}
	cf.Config.Labels = labels
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// entry is one file or directory of the layer.
type entry struct {
	path string // without a leading slash; a directory ends in /
	mode int64
	uid  int
	body []byte
}

// rootfs is the image's one layer, a gzipped tar with every entry's time
// at, owned by root except the state directory.
func rootfs(o options, arch string, at time.Time) (v1.Layer, error) {
	files := map[string][]byte{}
	for _, name := range []string{o.caCerts, o.binaries[arch], o.license, o.notices} {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		files[name] = b
	}
	entries := []entry{
		{path: "etc/", mode: 0o755},
		{path: "etc/group", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:\nbotctl:x:%d:\n", uid)},
		{path: "etc/passwd", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:0:root:/root:/usr/sbin/nologin\nbotctl:x:%d:%d:botctl:/var/lib/botctl:/usr/sbin/nologin\n", uid, uid)},
		{path: "etc/ssl/", mode: 0o755},
		{path: "etc/ssl/certs/", mode: 0o755},
		{path: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, body: files[o.caCerts]},
		{path: "tmp/", mode: 0o1777},
		{path: "usr/", mode: 0o755},
		{path: "usr/bin/", mode: 0o755},
		{path: "usr/bin/botctl", mode: 0o755, body: files[o.binaries[arch]]},
		{path: "usr/share/", mode: 0o755},
		{path: "usr/share/doc/", mode: 0o755},
		{path: "usr/share/doc/botctl/", mode: 0o755},
		{path: "usr/share/doc/botctl/LICENSE", mode: 0o644, body: files[o.license]},
		{path: "usr/share/doc/botctl/THIRD_PARTY_NOTICES.md", mode: 0o644, body: files[o.notices]},
		{path: "var/", mode: 0o755},
		{path: "var/lib/", mode: 0o755},
		{path: "var/lib/botctl/", mode: 0o700, uid: uid},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.path, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: at, Format: tar.FormatPAX}
		if strings.HasSuffix(e.path, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// archive tars the layout directory dir into out: sorted, every entry
// root-owned with time at.
func archive(dir, out string, at time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		names = append(names, p)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.Create(out + ".new")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	tw := tar.NewWriter(f)
	for _, p := range names {
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: at, Typeflag: tar.TypeReg, Size: fi.Size(), Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.IsDir() {
			body, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if _, err := tw.Write(body); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), out)
}
