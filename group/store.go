package group

import (
	"context"

	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/view"
)

// Store is what a Manager needs of the node's store: the values of its
// internal topics, the topics' logs read in order, and the node's
// vector. StoreOf makes one of a *store.Store; the package's unit tests
// run on one held in memory.
type Store interface {
	// Origin is this node's ID, the origin of its writes.
	Origin() uint64
	// Get is the value in force of (topic, key).
	Get(topic, key string) (view.Entry, bool)
	// Keys lists the live keys of topic in order, with prefix, after
	// after, at most limit of them (0: all).
	Keys(topic, prefix, after string, limit int) []string
	// Topics lists the topics the node holds, with their live keys.
	Topics() []view.TopicInfo
	// Vector is, per origin, the highest seq the node holds.
	Vector() map[uint64]uint64
	// Changed is closed at the next write the node takes.
	Changed() <-chan struct{}
	// TopicEnd is the offset one past topic's last message (0 for a
	// topic the node has never seen).
	TopicEnd(topic string) uint64
	// ResumeOffset is an offset of topic from which a reader meets every
	// message done (origin -> highest seq handled) does not cover.
	ResumeOffset(topic string, done map[uint64]uint64) uint64
	// NewTopicReader reads topic in order from start, only the messages
	// with one of tags when tags are given.
	NewTopicReader(topic string, start store.Start, tags []string) (TopicReader, error)
}

// TopicReader reads one topic in order (store.TopicReader).
type TopicReader interface {
	// Next is the next message, waiting for one until ctx ends; with ctx
	// ended, a message already there is still returned.
	Next(ctx context.Context) (store.Delivery, error)
	// Offset is the offset of the next message Next looks at.
	Offset() uint64
	// Close releases the reader.
	Close()
}

// StoreOf is s as a Manager's Store.
func StoreOf(s *store.Store) Store { return nodeStore{s} }

// nodeStore is a *store.Store whose readers are TopicReaders.
type nodeStore struct{ *store.Store }

func (s nodeStore) NewTopicReader(topic string, start store.Start, tags []string) (TopicReader, error) {
	r, err := s.Store.NewTopicReader(topic, start, tags)
	if err != nil {
		return nil, err
	}
	return r, nil
}
