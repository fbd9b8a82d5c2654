// Command notices writes THIRD_PARTY_NOTICES.md: every module whose code
// is linked into the botctl binary (for linux, with cgo off, as a release
// is built), its version, its license as an SPDX identifier where the text
// is one of the common ones, and the text of its license and NOTICE files,
// each distinct text once. The Go standard library and runtime, linked into
// every binary, come first.
//
//	go run ./scripts/notices            # rewrite THIRD_PARTY_NOTICES.md
//	go run ./scripts/notices -check     # exit 1 if it is not current
//
// The module graph is read with `go list -deps`, so the file follows go.mod:
// a dependency added, removed or upgraded changes it, and make test (which
// runs this package's TestNoticesCurrent) fails until it is written again.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Output is the file this command writes, relative to the module root.
const Output = "THIRD_PARTY_NOTICES.md"

// mainPackage is the binary whose dependencies are listed.
const mainPackage = "./cmd/botctl"

func main() {
	check := flag.Bool("check", false, "do not write: exit 1 when "+Output+" is not what this command would write")
	flag.Parse()
	root, err := moduleRoot()
	if err != nil {
		fail(err)
	}
	want, err := Generate(root)
	if err != nil {
		fail(err)
	}
	path := filepath.Join(root, Output)
	if *check {
		have, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(have, want) {
			fail(fmt.Errorf("%s is not current: run `go run ./scripts/notices` and commit it", Output))
		}
		return
	}
	if err := os.WriteFile(path, want, 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "notices:", err)
	os.Exit(1)
}

// module is one module linked into the binary.
type module struct {
	Path, Version, Dir string
	files              []file
}

// file is one license or notice file of a module.
type file struct {
	Name, Text string
}

// Generate returns the notices file for the module rooted at root.
func Generate(root string) ([]byte, error) {
	mods, err := linked(root)
	if err != nil {
		return nil, err
	}
	goroot, err := goEnv(root, "GOROOT")
	if err != nil {
		return nil, err
	}
	std := module{Path: "Go standard library and runtime", Dir: goroot}
	all := append([]module{std}, mods...)
	for i := range all {
		fs, err := licenseFiles(all[i].Dir)
		if err != nil {
			return nil, err
		}
		if len(fs) == 0 {
			return nil, fmt.Errorf("module %s %s has no license file in %s: find its license before it ships", all[i].Path, all[i].Version, all[i].Dir)
		}
		all[i].files = fs
	}
	return render(all), nil
}

// linked lists the modules other than the main one that provide packages
// of the botctl binary, sorted by path.
func linked(root string) ([]module, error) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}}\t{{.Version}}\t{{.Dir}}{{end}}{{end}}", mainPackage)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps %s: %w: %s", mainPackage, err, strings.TrimSpace(stderr.String()))
	}
	seen := map[string]module{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			continue
		}
		seen[f[0]] = module{Path: f[0], Version: f[1], Dir: f[2]}
	}
	mods := make([]module, 0, len(seen))
	for _, m := range seen {
		if m.Dir == "" {
			return nil, fmt.Errorf("module %s %s is not in the module cache: run `go mod download`", m.Path, m.Version)
		}
		mods = append(mods, m)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	return mods, nil
}

func goEnv(root, name string) (string, error) {
	cmd := exec.Command("go", "env", name)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run from inside the botctl module")
	}
	return filepath.Dir(mod), nil
}

// licenseName matches the files a module's license and notices are kept
// in, at its root: LICENSE, LICENCE, COPYING, NOTICE and PATENTS, with any
// suffix (LICENSE.txt, LICENSE.libyaml, NOTICE.md), but not Go source
// named after them (license_test.go).
var licenseName = regexp.MustCompile(`(?i)^(licen[cs]e|copying|notice|patents)([.\-_].*)?$`)

func isLicenseFile(name string) bool {
	return licenseName.MatchString(name) && !strings.HasSuffix(name, ".go")
}

func licenseFiles(dir string) ([]file, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read module directory: %w", err)
	}
	var fs []file
	hasLicense := false
	for _, e := range entries {
		if e.IsDir() || !isLicenseFile(e.Name()) {
			continue
		}
		b, err := readFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		fs = append(fs, file{Name: e.Name(), Text: normalize(string(b))})
		if up := strings.ToUpper(e.Name()); strings.HasPrefix(up, "LICEN") || strings.HasPrefix(up, "COPYING") {
			hasLicense = true
		}
	}
	if !hasLicense {
		return nil, nil
	}
	return fs, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// normalize makes a text's line ends and trailing space the same whatever
// the module's own checkout wrote, so the file is the same on every machine.
func normalize(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Trim(strings.Join(lines, "\n"), "\n")
}

// Classify names a license text by its SPDX identifier when it is one of
// the licenses this project's dependencies use, and "see text" otherwise.
// It reads the text's distinguishing sentences, not its copyright lines.
func Classify(text string) string {
	t := strings.Join(strings.Fields(strings.ToLower(text)), " ")
	has := func(s string) bool { return strings.Contains(t, s) }
	switch {
	case has("apache license") && has("version 2.0"):
		return "Apache-2.0"
	case has("mozilla public license") && (has("version 2.0") || has("v. 2.0")):
		return "MPL-2.0"
	case has("permission is hereby granted, free of charge"):
		return "MIT"
	case has("permission to use, copy, modify, and/or distribute this software for any purpose") ||
		has("permission to use, copy, modify, and distribute this software for any purpose"):
		return "ISC"
	case has("redistribution and use in source and binary forms"):
		if has("neither the name") || has("the names of its contributors may not") || has("names of its contributors may be used") {
			return "BSD-3-Clause"
		}
		return "BSD-2-Clause"
	}
	return "see text"
}

func licenseOf(m module) string {
	var ids []string
	for _, f := range m.files {
		up := strings.ToUpper(f.Name)
		if !strings.HasPrefix(up, "LICEN") && !strings.HasPrefix(up, "COPYING") {
			continue
		}
		id := Classify(f.Text)
		if !contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return strings.Join(ids, " AND ")
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func render(all []module) []byte {
	var b bytes.Buffer
	b.WriteString("# Third-party notices\n\n")
	b.WriteString("botctl is licensed under the Apache License 2.0 (LICENSE). The botctl binary links the code of\n")
	b.WriteString("the modules below; each is used under its own license, whose text follows. Written by\n")
	b.WriteString("`go run ./scripts/notices` from the module graph (linux, cgo off, as releases are built); do not\n")
	b.WriteString("edit by hand: `make test` fails when this file is not what that command writes.\n\n")
	b.WriteString("| module | version | license |\n|---|---|---|\n")
	for _, m := range all {
		v := m.Version
		if v == "" {
			v = "(the Go toolchain's)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", m.Path, v, licenseOf(m))
	}

	// Each distinct text once, under every module that carries it.
	type text struct {
		body  string
		users []string
	}
	var texts []*text
	byBody := map[string]*text{}
	for _, m := range all {
		for _, f := range m.files {
			name := m.Path + " (" + f.Name + ")"
			if t, ok := byBody[f.Text]; ok {
				t.users = append(t.users, name)
				continue
			}
			t := &text{body: f.Text, users: []string{name}}
			byBody[f.Text] = t
			texts = append(texts, t)
		}
	}
	b.WriteString("\n## License and notice texts\n")
	for _, t := range texts {
		b.WriteString("\n### " + strings.Join(t.users, ", ") + "\n\n")
		fence := "```"
		for strings.Contains(t.body, fence) {
			fence += "`"
		}
		b.WriteString(fence + "text\n" + t.body + "\n" + fence + "\n")
	}
	return b.Bytes()
}
