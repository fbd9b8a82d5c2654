package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The lease file (Config.LeaseFile) names the lease of this node's current
// candidacy for the bot, in hex. It is written before the candidacy's key
// is created and removed once the lease is revoked, so after a crash it
// names the lease that may still hold the bot: the next run revokes it
// before campaigning, and a standby takes over at once instead of after
// the TTL.

// revokePrevious revokes the lease named in the lease file, if it still
// exists, holds nothing but this bot's candidacy (its key is the election
// name plus the lease in hex) and the bot's pulse key, and that candidacy
// is this node's (its value names Config.NodeID), then removes the file.
// A lease with other keys, or another node's candidacy, is not ours to
// end: it is left alone (and the file removed). The node check is what
// keeps a copied data dir or a cloned VM (another node id, the same lease
// file) from revoking the live leader's lease. It fails only if etcd cannot be asked, so the caller retries
// before granting a new lease and the old one is never forgotten.
func (e *Elector) revokePrevious(ctx context.Context) error {
	path := e.cfg.LeaseFile
	if path == "" {
		return nil
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	id, perr := strconv.ParseInt(strings.TrimSpace(string(raw)), 16, 64)
	if err != nil || perr != nil || id == 0 {
		e.log.Warn().AnErr("read", err).AnErr("parse", perr).Str("file", path).Msg("lease file unreadable; ignoring it (a previous lease, if any, expires within TTL)")
		e.removeLeaseFile()
		return nil
	}
	lease := clientv3.LeaseID(id)
	rctx, cancel := context.WithTimeout(ctx, e.cfg.TTL)
	defer cancel()
	ttl, err := e.cli.TimeToLive(rctx, lease, clientv3.WithAttachedKeys())
	if err != nil {
		return fmt.Errorf("look up previous lease %s (from %s): %w", leaseHex(lease), path, err)
	}
	if ttl.TTL < 0 { // expired or revoked already
		e.removeLeaseFile()
		return nil
	}
	ours := e.name + "/" + leaseHex(lease)
	for _, k := range ttl.Keys {
		// Our candidacy's key, and, if it led, its pulse (bound to the
		// same lease).
		if string(k) != ours && string(k) != e.pulseKey {
			e.log.Warn().Str("lease", leaseHex(lease)).Str("key", string(k)).Str("file", path).
				Msg("previous lease holds a key that is not this bot's candidacy; not revoking it")
			e.removeLeaseFile()
			return nil
		}
	}
	for _, k := range ttl.Keys {
		if string(k) != ours {
			continue
		}
		resp, err := e.cli.Get(rctx, ours)
		if err != nil {
			return fmt.Errorf("read the previous candidacy %s (from %s): %w", ours, path, err)
		}
		var v value
		if len(resp.Kvs) == 1 && (json.Unmarshal(resp.Kvs[0].Value, &v) != nil || v.Node != e.cfg.NodeID) {
			e.log.Warn().Str("lease", leaseHex(lease)).Str("holder", v.Node).Str("file", path).
				Msg("the lease file names another node's candidacy (a copied data dir or a cloned VM?); not revoking it")
			e.removeLeaseFile()
			return nil
		}
	}
	if err := e.revoke(lease); err != nil {
		return err
	}
	e.log.Info().Str("lease", leaseHex(lease)).Int64("ttl_left_s", ttl.TTL).
		Msg("revoked this node's previous lease for the bot (left by a crash or an ended term): the next candidate need not wait for it to expire")
	return nil
}

// recordLease writes lease to the lease file (temp file and rename, so a
// crash leaves the old name or the new one). Failing to is logged, not
// fatal: the lease then merely expires within TTL after a crash.
func (e *Elector) recordLease(lease clientv3.LeaseID) {
	path := e.cfg.LeaseFile
	if path == "" {
		return
	}
	err := func() error {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(leaseHex(lease)+"\n"), 0o600); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}()
	if err != nil {
		e.log.Warn().Err(err).Str("file", path).Msg("cannot record the lease; after a crash the bot waits up to TTL for it")
	}
}

// forgetLease removes the lease file if it names lease (revoked now).
func (e *Elector) forgetLease(lease clientv3.LeaseID) {
	if e.cfg.LeaseFile == "" {
		return
	}
	raw, err := os.ReadFile(e.cfg.LeaseFile)
	if err == nil && strings.TrimSpace(string(raw)) == leaseHex(lease) {
		e.removeLeaseFile()
	}
}

func (e *Elector) removeLeaseFile() {
	if err := os.Remove(e.cfg.LeaseFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		e.log.Warn().Err(err).Str("file", e.cfg.LeaseFile).Msg("cannot remove the lease file")
	}
}
