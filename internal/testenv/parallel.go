package testenv

import (
	"flag"
	"fmt"
	"strconv"
)

// Parallel makes n the number of a package's parallel tests that run at
// once, unless -test.parallel was given. For a TestMain, before m.Run:
// tests that start servers of their own and mostly wait on time windows
// (scan intervals, paces, acks, answers), not on the CPU, run more at once
// than the default, GOMAXPROCS (2 on CI), would let.
func Parallel(n int) error {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given {
		return nil
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		return fmt.Errorf("set -test.parallel: %w", err)
	}
	return nil
}
