// Package index holds the indexes the store keeps beside its log, both
// derived from the log and rebuilt from it when damaged: per topic (offset
// -> record, RocketMQ's ConsumeQueue) and per origin (seq -> record), each
// an array of fixed-size entries in memory-mapped chunk files.
//
// # Why it is this large
//
// About 2,600 lines, of which array.go is 1,200: the chunked array both
// indexes are made of keeps its chunk files' life in one place (opening
// and scanning them after a crash, mapping, growing ahead of the writer
// with reused files, eviction, truncation, the retention's drops and
// their reaping, sync), all under the array's one lock and chunk table;
// splitting it would put that table behind an API with one caller. The
// two indexes (topics.go, origins.go), their sets (set.go), the preparer
// that makes chunks off the writer's path (preparer.go), the release of
// their pages from the resident set (release.go), the change log
// (changes.go) and the lookups (find.go) are files of their own.
package index

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/cachecast/cachecast/store/record"
)

// The store keeps two kinds of index next to the log, both arrays of
// fixed-size entries in chunk files (see array) and both derived from the
// log, so they can always be rebuilt from it:
//
//	<topic dir>/<escaped topic>/<20-digit first offset>   topic index chunks
//	<origin dir>/<16 hex digits>/<20-digit first seq>     origin index chunks
//
// The topic index is RocketMQ's ConsumeQueue: entry n of topic t describes
// the n-th message of t this node holds (its offset), so a reader walks a
// topic, filters on the tag hash and starts anywhere without touching the
// log. A topic index entry is 24 bytes, little endian:
//
//	0                               8               12              16                              24
//	+-------------------------------+---------------+---------------+-------------------------------+
//	|     pos + 1 (uint64)          |  size (u32)   | tag hash (u32)|          hlc (uint64)         |
//	+-------------------------------+---------------+---------------+-------------------------------+
//
// pos is the record's log position; it is stored plus one so that an
// all-zero entry still means "nothing written". size is the record's
// unpadded size, tag hash is TagHash of its tag.
//
// The origin index maps (origin, seq) to the record's log position, for
// deduplication and for serving one origin's records to a peer. Entry seq
// of origin o is 8 bytes: pos + 1 (uint64, little endian). Its chunks are
// numbered by seq, so the first chunk's name is the first seq retained.
//
// The escaped topic is the topic with every byte outside [A-Za-z0-9_.-]
// (and a leading '.') written as %XX; a topic whose escaped form is longer
// than maxTopicDirName is stored under "#" + hex(SHA-256(topic)) and its
// name kept in the file "#<hex>.name" beside the directory.
//
// Both are a set (set.go): one generic set of indexes by key, which holds
// what they share (opening, truncation, retention, sync, close) once, and
// follows the array's concurrency contract: one writer (Append or Put,
// Truncate, DropBefore, Reset, Close), any number of readers (Get, the
// topic's Entry, Len, First, SearchHLC, SearchPos, Last, Vector, Names,
// LastPos), and Sync from any goroutine.

// Entry is one entry of a topic index.
type Entry struct {
	Pos     int64  // log position of the record
	Size    uint32 // unpadded record size
	TagHash uint32 // TagHash of the record's tag
	HLC     uint64 // the record's HLC
}

const (
	topicEntrySize  = 24
	originEntrySize = 8

	// maxTopicDirName bounds the escaped topic used as a directory name,
	// well under the usual 255-byte limit of a file name.
	maxTopicDirName = 200

	topicNameSuffix = ".name"
)

func encodeIndexEntry(b []byte, e Entry) {
	_ = b[topicEntrySize-1]
	binary.LittleEndian.PutUint64(b[0:], uint64(e.Pos)+1)
	binary.LittleEndian.PutUint32(b[8:], e.Size)
	binary.LittleEndian.PutUint32(b[12:], e.TagHash)
	binary.LittleEndian.PutUint64(b[16:], e.HLC)
}

// decodeIndexEntry reads an entry; a zero position field (a hole left by a
// crash, never written) is ErrCorrupt.
func decodeIndexEntry(b []byte) (Entry, error) {
	_ = b[topicEntrySize-1]
	p := binary.LittleEndian.Uint64(b[0:])
	if p == 0 {
		return Entry{}, fmt.Errorf("%w: empty index entry", record.ErrCorrupt)
	}
	return Entry{
		Pos:     int64(p - 1),
		Size:    binary.LittleEndian.Uint32(b[8:]),
		TagHash: binary.LittleEndian.Uint32(b[12:]),
		HLC:     binary.LittleEndian.Uint64(b[16:]),
	}, nil
}

// entryPos reads the log position of entry i of an index array (both kinds
// keep it in the first 8 bytes).
func entryPos(a *array, i uint64) (int64, error) {
	var buf [topicEntrySize]byte
	if err := a.read(i, buf[:a.entrySize]); err != nil {
		return 0, err
	}
	p := binary.LittleEndian.Uint64(buf[:8])
	if p == 0 {
		return 0, fmt.Errorf("%w: empty index entry %d in %s", record.ErrCorrupt, i, a.dir)
	}
	return int64(p - 1), nil
}

// searchPos returns the first entry of a whose position is at least pos
// (len() if none). Positions increase along an index.
func searchPos(a *array, pos int64) (uint64, error) {
	lo, hi := a.first(), a.len()
	for lo < hi {
		mid := lo + (hi-lo)/2
		p, err := entryPos(a, mid)
		if err != nil {
			return 0, err
		}
		if p >= pos {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// lastEntryPos is the position of a's last entry, -1 if it has none.
func lastEntryPos(a *array) (int64, error) {
	n := a.len()
	if n == a.first() {
		return -1, nil
	}
	return entryPos(a, n-1)
}

// truncateIndex drops the entries of a at or after log position pos and
// returns the new last position.
func truncateIndex(a *array, pos int64) (int64, error) {
	k, err := searchPos(a, pos)
	if err != nil {
		return 0, err
	}
	if err := a.truncate(k); err != nil {
		return 0, err
	}
	return lastEntryPos(a)
}

// dropIndexBefore drops the chunks of a whose entries all lie before log
// position pos.
func dropIndexBefore(a *array, pos int64) error {
	k, err := searchPos(a, pos)
	if err != nil {
		return err
	}
	return a.dropChunksBefore(k, pos)
}

// topicDirName is the directory name of a topic's index.
func topicDirName(topic string) string {
	var sb strings.Builder
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '-' || c == '.' && i > 0 {
			sb.WriteByte(c)
		} else {
			fmt.Fprintf(&sb, "%%%02X", c)
		}
	}
	if sb.Len() > maxTopicDirName {
		sum := sha256.Sum256([]byte(topic))
		return "#" + hex.EncodeToString(sum[:])
	}
	return sb.String()
}

// parseTopicDirName is topicDirName's inverse for escaped names; hashed
// names ("#...") are resolved by the caller through their name file.
func parseTopicDirName(name string) (string, bool) {
	if name == "" || strings.HasPrefix(name, "#") {
		return "", false
	}
	var b []byte
	for i := 0; i < len(name); i++ {
		if name[i] != '%' {
			b = append(b, name[i])
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		v, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(v))
		i += 2
	}
	topic := string(b)
	if topicDirName(topic) != name {
		return "", false // not in canonical form: not ours
	}
	return topic, true
}
