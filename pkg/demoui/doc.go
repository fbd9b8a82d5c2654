// Package demoui is the page `botctl serve --demo` opens on: a chat in
// which a person plays a WeCom user and watches the answer arrive frame by
// frame (receipt, progress, heartbeat line, the stream closed at its window,
// the full answer pushed later), beside a live view of the cluster
// (leader per bot, nodes, recent tasks, incidents) that shows a failover
// as it happens.
//
// The page is static HTML, CSS and JavaScript embedded in the binary (no
// build step, nothing fetched from elsewhere: it works on a machine with no
// internet). It polls two JSON endpoints of the node API that serves it:
//
//	GET  /demo/api/cluster     the live view (etcd and JetStream, read only)
//	GET  /demo/api/transcript  one chat's transcript, from the simulator
//	POST /demo/api/messages    a user message, posted to the simulator
//
// What it guarantees: everything but POST /demo/api/messages only reads.
// That one write goes to the WeCom simulator, never to real WeCom: the
// chat is on only when the node's WeCom URL is a simulator's (ws://, see
// SimulatorURL). It refuses a body that is not JSON (so a form on another
// site cannot post it) and a request whose Origin is another site. The
// chat's two endpoints, that write and the transcript (what users asked
// and were answered), are behind the node API's token (api.token_file's,
// or the one the node generated in its data dir); the page takes it from
// its link (#token=…, never sent to the server) or asks the person for
// it, and sends it with both. The page's configuration and the live view are not; the
// live view shows the newest tasks' questions, clipped to 80 characters,
// never an answer.
//
// What it does not: it is a demonstration, not a console. Every page
// polls once a second and each poll reads the node registry, the
// elections and the newest task records (at most maxTaskKeys records are
// read), so keep it to a few open pages on a small cluster.
package demoui
