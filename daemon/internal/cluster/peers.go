package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/gossip"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/wire"
)

// A node remembers the members it has seen in <data-dir>/peers.json, so
// that a restart finds the cluster whatever the order: a seed stopped
// with SIGTERM (the others saw it leave, and a lone node calls only its
// --join seeds) and started again without --join would otherwise be a
// cluster of one that nobody calls. At start the daemon joins a few of
// them beside its --join seeds, and hands all of them to gossip's
// reconnect loop, which calls them back one at a time as members that
// failed, for as long as it calls a member that failed or left
// (peerGrace). The file is rewritten (temp file, fsync, rename, directory
// fsync) when the set of members or an address changes, at a clean stop,
// and at least every peersRefresh while members are alive, so that the
// time a member was last seen stays close enough to prune by.

// peersFile is the remembered members' file in the data directory.
const peersFile = "peers.json"

// peersRefresh is how often the file is rewritten at least while members
// are alive (their last-seen times move on).
const peersRefresh = time.Hour

// peersAtJoin is how many remembered members the first join contacts
// beside the --join seeds: a few suffice (the first that answers brings
// the whole membership), and a large fleet's hundreds would each cost a
// push/pull at start. The others are called by the reconnect loop.
const peersAtJoin = 3

// rememberedPeer is one member in peers.json.
type rememberedPeer struct {
	Name     string `json:"name"`
	Origin   string `json:"origin"`
	Addr     string `json:"addr"`      // gossip address
	DataAddr string `json:"data_addr"` // data-port address
	// SeenMS is when it was last seen alive, Unix milliseconds.
	SeenMS int64 `json:"seen_ms"`
}

// peersDoc is the file's JSON.
type peersDoc struct {
	Version int              `json:"version"`
	Peers   []rememberedPeer `json:"peers"`
}

// parsePeers decodes peers.json, keeping the entries that name a member
// with a gossip address.
func parsePeers(b []byte) ([]rememberedPeer, error) {
	var doc peersDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", peersFile, err)
	}
	if doc.Version != 1 {
		return nil, fmt.Errorf("%s: version %d, want 1", peersFile, doc.Version)
	}
	out := doc.Peers[:0]
	for _, p := range doc.Peers {
		if p.Name != "" && p.Addr != "" {
			out = append(out, p)
		}
	}
	return out, nil
}

// peerBook is the members this node has seen: loaded from peers.json at
// start, kept current by the cluster's membership refreshes. Safe for
// concurrent use.
type peerBook struct {
	path  string
	self  string
	grace time.Duration // a member not seen for longer is forgotten
	log   *zap.Logger

	mu      sync.Mutex
	peers   map[string]rememberedPeer
	dirty   bool
	written time.Time
	// alive is the names alive at the last update; seenAlive holds every
	// member seen alive since this start (the ones a split is measured
	// against).
	alive     map[string]bool
	seenAlive map[string]bool
	// retired, when set, lists the origins the fleet has retired
	// (--retire-origins-after: gone for good): their members are
	// forgotten, not missing.
	retired func() []uint64
}

// loadPeerBook reads peers.json in dir (none is an empty book), dropping
// this node and the members not seen for longer than grace. A damaged
// file is logged and set aside as an empty book: it is a hint, not data.
func loadPeerBook(dir, self string, grace time.Duration, now time.Time, log *zap.Logger) *peerBook {
	pb := &peerBook{path: filepath.Join(dir, peersFile), self: self, grace: grace, log: log,
		peers: map[string]rememberedPeer{}, alive: map[string]bool{}, seenAlive: map[string]bool{}}
	b, err := os.ReadFile(pb.path)
	if errors.Is(err, fs.ErrNotExist) {
		return pb
	}
	var peers []rememberedPeer
	if err == nil {
		peers, err = parsePeers(b)
	}
	if err != nil {
		log.Warn("the remembered peers are unreadable; starting from --join alone", zap.String("path", pb.path), zap.Error(err))
		return pb
	}
	for _, p := range peers {
		if p.Name == self || now.Sub(time.UnixMilli(p.SeenMS)) > grace {
			pb.dirty = true
			continue
		}
		pb.peers[p.Name] = p
	}
	return pb
}

// remembered is the book as gossip's Config.Remembered.
func (pb *peerBook) remembered() []gossip.Remembered {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	var out []gossip.Remembered
	for _, p := range pb.peers {
		id, _ := strconv.ParseUint(p.Origin, 16, 64) // 0 (unknown) when damaged: matched by name and address
		out = append(out, gossip.Remembered{Name: p.Name, ID: id, Addr: p.Addr, Since: time.UnixMilli(p.SeenMS)})
	}
	return out
}

// seeds is join plus up to peersAtJoin remembered addresses (picked at
// random) that join does not hold.
func (pb *peerBook) seeds(join []string) []string {
	pb.mu.Lock()
	var addrs []string
	for _, p := range pb.peers {
		if !slices.Contains(join, p.Addr) {
			addrs = append(addrs, p.Addr)
		}
	}
	pb.mu.Unlock()
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	return append(slices.Clone(join), addrs[:min(len(addrs), peersAtJoin)]...)
}

// update records the members as gossip reports them now; members not
// seen for longer than the grace are forgotten.
func (pb *peerBook) update(members []gossip.Member, now time.Time) {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	clear(pb.alive)
	for _, m := range members {
		if m.Name == pb.self || m.Addr == "" {
			continue
		}
		p, known := pb.peers[m.Name]
		if m.State == gossip.StateAlive {
			pb.alive[m.Name] = true
			pb.seenAlive[m.Name] = true
			np := rememberedPeer{Name: m.Name, Origin: wire.FormatOrigin(m.ID), Addr: m.Addr, DataAddr: m.DataAddr, SeenMS: now.UnixMilli()}
			if !known || np.Origin != p.Origin || np.Addr != p.Addr || np.DataAddr != p.DataAddr {
				pb.dirty = true
			}
			pb.peers[m.Name] = np
		}
	}
	for name, p := range pb.peers {
		if !pb.alive[name] && now.Sub(time.UnixMilli(p.SeenMS)) > pb.grace {
			delete(pb.peers, name)
			delete(pb.seenAlive, name)
			pb.dirty = true
		}
	}
}

// missing names the members seen alive since this start, or remembered
// from before it, that are not alive now: the ones a split or a stop took
// away, until they come back or the grace passes. Sorted.
func (pb *peerBook) missing() []string {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	pb.forgetRetired()
	var out []string
	for name := range pb.peers {
		if !pb.alive[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// forgetRetired drops the members whose origin the fleet has retired: a
// machine removed for good would otherwise count as missing, and keep the
// fleet degraded and verify failing, until the grace passed. pb.mu held.
func (pb *peerBook) forgetRetired() {
	if pb.retired == nil {
		return
	}
	for _, o := range pb.retired() {
		origin := wire.FormatOrigin(o)
		for name, p := range pb.peers {
			if p.Origin == origin && !pb.alive[name] {
				delete(pb.peers, name)
				delete(pb.seenAlive, name)
				pb.dirty = true
				pb.log.Info("forgot a member whose origin the fleet retired", zap.String("member", name), zap.String("origin", origin))
			}
		}
	}
}

// forget drops name from the book (a member removed for good: it is no
// longer missing, nor called back) and reports whether the book held
// it; a member alive now is refused.
func (pb *peerBook) forget(name string) (bool, error) {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	if pb.alive[name] {
		return false, fmt.Errorf("%s is alive: stop it for good first", name)
	}
	_, held := pb.peers[name]
	delete(pb.peers, name)
	delete(pb.seenAlive, name)
	pb.dirty = pb.dirty || held
	return held, nil
}

// empty reports whether the book remembers no member.
func (pb *peerBook) empty() bool {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	return len(pb.peers) == 0
}

// setRetired sets what lists the retired origins (forgetRetired).
func (pb *peerBook) setRetired(retired func() []uint64) {
	pb.mu.Lock()
	pb.retired = retired
	pb.mu.Unlock()
}

// save writes the file if it changed, or if force, or if it is older than
// peersRefresh. A failure is logged, not fatal: the file is a hint.
func (pb *peerBook) save(now time.Time, force bool) {
	pb.mu.Lock()
	if !pb.dirty && !force && now.Sub(pb.written) < peersRefresh {
		pb.mu.Unlock()
		return
	}
	doc := peersDoc{Version: 1}
	for _, p := range pb.peers {
		doc.Peers = append(doc.Peers, p)
	}
	pb.dirty, pb.written = false, now
	pb.mu.Unlock()
	sort.Slice(doc.Peers, func(i, j int) bool { return doc.Peers[i].Name < doc.Peers[j].Name })
	b, err := json.MarshalIndent(doc, "", "  ")
	if err == nil {
		err = store.WriteFileAtomic(pb.path, append(b, '\n'))
	}
	if err != nil {
		pb.log.Warn("remembering the peers failed", zap.String("path", pb.path), zap.Error(err))
		pb.mu.Lock()
		pb.dirty = true
		pb.mu.Unlock()
	}
}

// peerGrace is how long a member that failed or left is called back and
// remembered: gossip's reconnect timeout, at least --tombstone-grace (a
// member away longer must start over anyway).
func peerGrace(tombstoneGrace time.Duration) time.Duration {
	return max(gossip.DefaultReconnectTimeout, tombstoneGrace)
}
