package fsys

// EvictLRU is the one map evictor of the store's caches of maps (the log's
// segments, an index's chunks): while over reports more maps than the
// cache may hold, it picks among candidates() the one that may go (mayGo:
// mapped, unpinned, not the one being written) with the oldest use mark
// (used) and hands it to drop, which unmaps it. It stops when nothing may
// go (all pinned: the cache holds more for now) or when drop reports that
// it could not (the next call tries again). The caller holds the lock that
// guards the maps.
func EvictLRU[T comparable](over func() bool, candidates func() []T, mayGo func(T) bool, used func(T) uint64, drop func(T) bool) {
	for over() {
		var victim, none T
		for _, c := range candidates() {
			if mayGo(c) && (victim == none || used(c) < used(victim)) {
				victim = c
			}
		}
		if victim == none || !drop(victim) {
			return
		}
	}
}
