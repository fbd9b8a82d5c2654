// Command load runs botctl's load benchmarks against an in-process cluster
// (embedded etcd, embedded NATS, the WeCom simulator with its recorder on,
// botctl nodes via serve.Run) and writes a Markdown report.
//
//	go run ./test/load receipt -out bench/receipt.md   # receipt latency, dispatch saturation, worker scaling
//	go run ./test/load push -out bench/push.md         # push lag and scale (1,000 and 5,000 conversations)
//	go run ./test/load completion -out bench/completion.md  # completion time, default configuration, three nodes
//	go run ./test/load ramp -out bench/ramp.md     # the issue-12 ramp on real processes, naive bot beside it (+ .csv, -*.png)
//	go run ./test/load ramp -topology r3 -out bench/ramp-r3.md  # the same on the production topology
//
// receipt, push and completion run the cluster in this process; ramp runs
// every part as a process of its own (etcd, NATS, `botctl sim`, `botctl
// serve` ×3) and measures from outside. Its -topology is single (one etcd,
// one NATS server, JetStream replicas 1: the default, bench/ramp.md's) or
// r3 (3 etcd members and 3 NATS servers from test/infracluster, the nodes
// at --nats-replicas 3: the topology production uses). It is a main package: `go test
// ./test/load` runs only the ramp's smoke test.
// The "node", "etcd", "nats" and "naive" subcommands are internal: child
// processes (a worker node, an etcd, a NATS server, the naive bot).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/botctl/botctl/pkg/serve"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: load receipt|push|completion|ramp [flags]   (see the package comment)")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "receipt":
		err = receiptMain(os.Args[2:])
	case "push":
		err = pushMain(os.Args[2:])
	case "completion":
		err = completionMain(os.Args[2:])
	case "ramp":
		err = rampMain(os.Args[2:])
	case "node":
		err = nodeMain(os.Args[2:])
	case "etcd":
		err = etcdMain(os.Args[2:])
	case "nats":
		err = natsMain(os.Args[2:])
	case "naive":
		err = naiveMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want receipt, push, completion or ramp", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

// nodeMain is a child node: runs until SIGTERM.
func nodeMain(args []string) error {
	fs := flag.NewFlagSet("node", flag.ExitOnError)
	var p nodeParams
	fs.StringVar(&p.ID, "id", "w", "node id")
	dir := fs.String("dir", "", "data dir")
	wsURL := fs.String("wecom", "", "WeCom URL")
	etcd := fs.String("etcd", "", "etcd endpoints")
	natsURL := fs.String("nats", "", "NATS URL")
	fs.IntVar(&p.Slots, "slots", 0, "worker slots")
	fs.IntVar(&p.LeaderSlots, "leader-slots", 0, "worker slots while leading")
	fs.DurationVar(&p.AnswerTime, "answer-time", time.Second, "demo answer time")
	fs.IntVar(&p.AnswerBytes, "answer-bytes", 0, "demo answer bytes")
	fs.Parse(args)
	cfg, err := nodeConfig(p, *dir, *wsURL)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return runNode(ctx, cfg, strings.Split(*etcd, ","), *natsURL, func(*serve.Node) { fmt.Println("ready") })
}
