package resp

import (
	"slices"
	"strings"

	"github.com/cachecast/cachecast/resp/internal/session"
)

// PUBSUB CHANNELS, NUMSUB and NUMPAT answer about this node's
// subscriptions, as PUBLISH counts this node's receivers: a subscriber
// of another node is not counted. Shard channels (SSUBSCRIBE) are not
// served, so SHARDCHANNELS and SHARDNUMSUB find none.

func pubsubCommands() []*session.Command {
	return []*session.Command{
		{Name: "pubsub", Arity: -2, Flags: []string{"pubsub", "loading", "stale"}, Group: "pubsub",
			Summary: "CHANNELS, NUMSUB, NUMPAT of this node's subscriptions; SHARDCHANNELS, SHARDNUMSUB (none).", Fn: own(cmdPubsub), InMulti: true, Subcommands: pubsubArity},
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
func cmdPubsub(c *conn, a [][]byte) {
	c.s.subs.reapHungUp() // as PUBLISH counts: not a client that has closed
	switch sub := strings.ToLower(session.Str(a[1])); {
	case sub == "help":
		c.Help("PUBSUB", pubsubHelp)
	case (sub == "channels" || sub == "shardchannels") && len(a) > 3:
		c.Err("ERR unknown subcommand or wrong number of arguments for '" + session.CString(a[1], 128) + "'. Try PUBSUB HELP.")
	case sub == "channels":
		pat := "*"
		if len(a) == 3 {
			pat = string(a[2])
		}
		names := c.s.subs.channelNames(pat)
		c.Array(len(names))
		for _, n := range names {
			c.BulkString(n)
		}
	case sub == "shardchannels":
		c.Array(0)
	case sub == "numpat":
		c.Int(int64(c.s.subs.livePatterns()))
	default: // numsub, shardnumsub
		c.Array(2 * (len(a) - 2))
		for _, ch := range a[2:] {
			c.Bulk(ch)
			n := 0
			if sub == "numsub" {
				n = c.s.subs.subscribers(session.Str(ch))
			}
			c.Int(int64(n))
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
