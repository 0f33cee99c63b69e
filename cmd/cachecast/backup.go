package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/backup"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/wire"
)

var backupCmd = &command{
	name:    "backup",
	args:    "FILE",
	summary: "save a running node's view, cursors and group state to FILE, with a checksum",
	help: `Asks the daemon (GET /v1/backup, the admin role) for its view, as it
streams it to a peer that bootstraps, with the consumer groups' state (in
the view), its durable cursors and its name and origin, while writes go
on. The file is written beside FILE, its SHA-256 checked, synced, then
renamed to FILE: a FILE that exists is whole. Seed a new node from it
with "cachecast restore".`,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		return func(ctx context.Context, e *env, args []string) error {
			c := g.client()
			defer c.Close()
			path := args[0]
			tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name())
			defer tmp.Close()
			n, err := c.Backup(ctx, tmp)
			if err != nil {
				return err
			}
			if _, err := tmp.Seek(0, io.SeekStart); err != nil {
				return err
			}
			meta, err := backup.Verify(tmp)
			if err != nil {
				return fmt.Errorf("the daemon's backup is not whole (did it stop?): %w", err)
			}
			if err := tmp.Sync(); err != nil {
				return err
			}
			if err := os.Rename(tmp.Name(), path); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "backup of %s (origin %s): %d bytes, %d cursors, checksum verified\n", meta.Node, meta.Origin, n, len(meta.Cursors))
			return nil
		}
	},
}

var restoreCmd = &command{
	name:    "restore",
	args:    "FILE",
	summary: "seed a new node's empty data directory from a backup, before its first start",
	help: `Run it before cachecastd's first start on the new node, as the user the
daemon runs as (the package's: sudo -u cachecast cachecast restore
--data-dir /var/lib/cachecast FILE). It checks FILE's checksum and format
first, refuses a data directory that holds anything, then makes a new
node there: a new origin (never the backed-up node's), the backup's view
and consumer-group state, and its durable cursors by name, topic and
owner, each at the start of the new node's log (it reads what reaches
the node from then on). Started, the node joins its cluster and catches
up from its peers with what was written since the backup.`,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		dir := fs.String("data-dir", "./data", "the new node's data directory: absent or empty")
		return func(ctx context.Context, e *env, args []string) error {
			meta, origin, err := restore(args[0], *dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "restored %s's backup of %s into %s: new origin %s (was %s), %d cursors\n",
				meta.Node, meta.Created.Format("2006-01-02T15:04:05Z"), *dir, origin, meta.Origin, len(meta.Cursors))
			return nil
		}
	},
}

// restore verifies the backup at path, then seeds the empty directory dir
// with it; it returns the backup's metadata and the new node's origin.
func restore(path, dir string) (backup.Meta, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return backup.Meta{}, "", err
	}
	defer f.Close()
	if _, err := backup.Verify(f); err != nil {
		return backup.Meta{}, "", fmt.Errorf("%s: %w", path, err)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return backup.Meta{}, "", fmt.Errorf("%s is not empty: restore seeds a new node only (a node's directory is never shared or overwritten)", dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return backup.Meta{}, "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return backup.Meta{}, "", err
	}
	rd, err := backup.NewReader(f)
	if err != nil {
		return backup.Meta{}, "", err
	}
	st, err := store.Open(store.DefaultOptions(dir))
	if err != nil {
		return backup.Meta{}, "", err
	}
	if _, err := st.Bootstrap(rd.Snapshot()); err != nil {
		st.Close()
		return backup.Meta{}, "", fmt.Errorf("%s: %w", path, err)
	}
	for _, c := range rd.Meta.Cursors {
		if c.Owned {
			err = st.SetCursorAs(c.Owner, true, c.Name, c.Topic, 0)
		} else {
			err = st.SetCursor(c.Name, c.Topic, 0)
		}
		if err != nil {
			st.Close()
			return backup.Meta{}, "", fmt.Errorf("cursor %s: %w", c.Name, err)
		}
	}
	origin := wire.FormatOrigin(st.Origin())
	return rd.Meta, origin, st.Close()
}
