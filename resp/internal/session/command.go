package session

// RedisVersion is the Redis version the server answers like (HELLO,
// INFO).
const RedisVersion = "7.2.0"

// Command is one entry of the command table.
type Command struct {
	Name    string // lower case, as COMMAND lists it
	Arity   int    // Redis's convention: n exactly, -n at least n
	Flags   []string
	First   int // first key argument (0: none)
	Last    int
	Step    int
	Group   string
	Summary string
	Fn      func(s *Session, a [][]byte)
	Write   bool // goes through the node's publish path
	Pubsub  bool // allowed while a RESP2 connection is subscribed
	InMulti bool // may be queued after MULTI
	Read    bool // reads the view: -LOADING while the node catches up, -CLUSTERDOWN when away
	// Subcommands: a container's subcommands and their arities, as
	// Redis's command table has them (nil: none), checked before the
	// command runs, as Redis checks them.
	Subcommands map[string]int
	Index       int // into the per-command counters
}
