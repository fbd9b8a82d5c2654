// Command botctl keeps WeCom AI bots answering: see README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/botctl/botctl/pkg/redact"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		// The last line an operator sees carries no URL credential.
		msg := redact.String(err.Error())
		var ue usageError
		if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
			fmt.Fprintln(os.Stderr, "botctl:", msg)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "botctl:", msg)
		os.Exit(1)
	}
}

// usageError is a mistake in flags or arguments: exit code 2.
type usageError struct{ error }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}
