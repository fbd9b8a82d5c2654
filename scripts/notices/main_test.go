package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoticesCurrent fails when THIRD_PARTY_NOTICES.md is not what
// `go run ./scripts/notices` writes from today's module graph: a
// dependency added, removed or upgraded without the file written again.
func TestNoticesCurrent(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	want, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(root, Output))
	if err != nil {
		t.Fatalf("%v: run `go run ./scripts/notices` and commit %s", err, Output)
	}
	if !bytes.Equal(have, want) {
		t.Fatalf("%s is not current: run `go run ./scripts/notices` and commit it", Output)
	}
	// Every module is named with a license the table can say.
	for _, line := range strings.Split(string(have), "\n") {
		if strings.HasPrefix(line, "| ") && strings.HasSuffix(line, "| see text |") {
			t.Errorf("a module's license is not one the notices name: %s (read its text and extend Classify)", line)
		}
	}
}

func TestNoticesNameTheBinarysModules(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| Go standard library and runtime | (the Go toolchain's) | BSD-3-Clause |",
		"| go.etcd.io/etcd/client/v3 | v3.7.3 | Apache-2.0 |",
		"| github.com/nats-io/nats.go |",
		"| github.com/rs/zerolog |",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("notices lack %q", want)
		}
	}
	// Linked into the binary only: a test-only dependency is not listed.
	if bytes.Contains(out, []byte("| go.uber.org/goleak |")) {
		t.Error("notices list goleak, which only tests use")
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"Apache License\nVersion 2.0, January 2004", "Apache-2.0"},
		{"Permission is hereby granted, free of charge, to any person", "MIT"},
		{"Permission to use, copy, modify, and/or distribute this software for any purpose with or without fee", "ISC"},
		{"Redistribution and use in source and binary forms, with or without\nmodification ... Neither the name of Google Inc.", "BSD-3-Clause"},
		{"Redistribution and use in source and binary forms, with or without modification, are permitted", "BSD-2-Clause"},
		{"Mozilla Public License Version 2.0", "MPL-2.0"},
		{"All rights reserved. Do not copy.", "see text"},
	} {
		if got := Classify(c.text); got != c.want {
			t.Errorf("Classify(%q) = %s, want %s", c.text, got, c.want)
		}
	}
}

func TestLicenseFileNames(t *testing.T) {
	for name, want := range map[string]bool{
		"LICENSE": true, "LICENSE.txt": true, "LICENSE.libyaml": true, "licence.md": true,
		"COPYING": true, "NOTICE": true, "NOTICE.txt": true, "PATENTS": true,
		"LICENSES_TEST.go": false, "README.md": false, "license_test.go": false,
	} {
		if got := isLicenseFile(name); got != want {
			t.Errorf("%s: matched %v, want %v", name, got, want)
		}
	}
}
