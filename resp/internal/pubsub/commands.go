package pubsub

import (
	"bytes"
	"slices"
	"strconv"
	"strings"

	"github.com/cachecast/cachecast/resp/internal/session"
	"github.com/cachecast/cachecast/store/record"
)

// PUBSUB CHANNELS, NUMSUB and NUMPAT answer about this node's
// subscriptions, as PUBLISH counts this node's receivers: a subscriber
// of another node is not counted. Shard channels (SSUBSCRIBE) are not
// served, so SHARDCHANNELS and SHARDNUMSUB find none.

// Commands is the pushes' part of the command table.
func Commands() []*session.Command {
	ps := []string{"pubsub", "noscript", "loading", "stale"}
	return []*session.Command{
		{Name: "publish", Arity: 3, Flags: []string{"pubsub", "loading", "stale", "fast"}, Group: "pubsub", Summary: "A keyless message on the channel's topic, to every node.", Fn: cmdPublish, Write: true},
		{Name: "monitor", Arity: 1, Flags: []string{"admin", "noscript", "loading", "stale"}, Group: "server", Summary: "Streams every command the server runs, as Redis writes them: for the admin role.", Fn: cmdMonitor},
		{Name: "subscribe", Arity: -2, Flags: ps, Group: "pubsub", Summary: "Messages of topics and keys, from every node.", Fn: cmdSubscribe, Pubsub: true},
		{Name: "psubscribe", Arity: -2, Flags: ps, Group: "pubsub", Summary: "Like SUBSCRIBE, by pattern.", Fn: cmdPSubscribe, Pubsub: true},
		{Name: "unsubscribe", Arity: -1, Flags: ps, Group: "pubsub", Summary: "Ends subscriptions.", Fn: cmdUnsubscribe, Pubsub: true},
		{Name: "punsubscribe", Arity: -1, Flags: ps, Group: "pubsub", Summary: "Ends pattern subscriptions.", Fn: cmdPUnsubscribe, Pubsub: true},
		{Name: "pubsub", Arity: -2, Flags: []string{"pubsub", "loading", "stale"}, Group: "pubsub",
			Summary: "CHANNELS, NUMSUB, NUMPAT of this node's subscriptions; SHARDCHANNELS, SHARDNUMSUB (none).", Fn: cmdPubsub, InMulti: true, Subcommands: pubsubArity},
	}
}

// pubsubArity is each PUBSUB subcommand's arity, as Redis's command
// table has it.
var pubsubArity = map[string]int{"channels": -2, "numsub": -2, "numpat": 2, "shardchannels": -2, "shardnumsub": -2, "help": 2}

// pubsubHelp is PUBSUB HELP's list, Redis 7.0's words.
var pubsubHelp = []string{
	"CHANNELS [<pattern>]",
	"    Return the currently active channels matching a <pattern> (default: '*').",
	"NUMPAT",
	"    Return number of subscriptions to patterns.",
	"NUMSUB [<channel> ...]",
	"    Return the number of subscribers for the specified channels, excluding",
	"    pattern subscriptions(default: no channels).",
	"SHARDCHANNELS [<pattern>]",
	"    Return the currently active shard level channels matching a <pattern> (default: '*').",
	"SHARDNUMSUB [<shardchannel> ...]",
	"    Return the number of subscribers for the specified shard level channel(s)",
}

// cmdPubsub serves PUBSUB's subcommands, whose names and arities exec
// checked first (pubsubArity).
func cmdPubsub(s *session.Session, a [][]byte) {
	c := peerOf(s)
	c.hub.subs.reapHungUp() // as PUBLISH counts: not a client that has closed
	switch sub := strings.ToLower(session.Str(a[1])); {
	case sub == "help":
		c.sess.Help("PUBSUB", pubsubHelp)
	case (sub == "channels" || sub == "shardchannels") && len(a) > 3:
		c.sess.Err("ERR unknown subcommand or wrong number of arguments for '" + session.CString(a[1], 128) + "'. Try PUBSUB HELP.")
	case sub == "channels":
		pat := "*"
		if len(a) == 3 {
			pat = string(a[2])
		}
		names := c.hub.subs.channelNames(pat)
		c.sess.Array(len(names))
		for _, n := range names {
			c.sess.BulkString(n)
		}
	case sub == "shardchannels":
		c.sess.Array(0)
	case sub == "numpat":
		c.sess.Int(int64(c.hub.subs.livePatterns()))
	default: // numsub, shardnumsub
		c.sess.Array(2 * (len(a) - 2))
		for _, ch := range a[2:] {
			c.sess.Bulk(ch)
			n := 0
			if sub == "numsub" {
				n = c.hub.subs.subscribers(session.Str(ch))
			}
			c.sess.Int(int64(n))
		}
	}
}

// channelNames is the channels with a subscriber (not closed) that
// match pattern, in name order.
func (p *subscriptions) channelNames(pattern string) []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out []string
	for name, set := range p.channels {
		if live(set) > 0 && session.Match(pattern, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// subscribers is how many connections (not closed) subscribed to
// channel, patterns not counted, as PUBSUB NUMSUB counts them.
func (p *subscriptions) subscribers(channel string) int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return live(p.channels[channel])
}

// livePatterns is how many patterns have a subscriber that is not
// closed, as PUBSUB NUMPAT counts them.
func (p *subscriptions) livePatterns() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	n := 0
	for _, set := range p.patterns {
		if live(set) > 0 {
			n++
		}
	}
	return n
}

func cmdPublish(c *session.Session, a [][]byte) {
	ch := string(a[1])
	if session.TopicOf(a[1]) == "" {
		c.Err("ERR PUBLISH channel " + strconv.Quote(session.Clip(a[1])) + ": a channel names a topic (1 to 128 bytes of A-Z a-z 0-9 . _ -); keyed updates are published with SET topic:key")
		return
	}
	if !c.Publish([]record.Message{{Topic: ch, Value: bytes.Clone(a[2])}}) {
		return
	}
	c.Int(int64(peerOf(c).hub.subs.receivers(ch)))
}
