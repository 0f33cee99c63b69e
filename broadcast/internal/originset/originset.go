// Package originset keeps the sets of origins that the data port's
// bookkeeping drains and refills all the time (the origins changed since
// a frame, those a peer is ahead on) at the cost of what they hold, not
// of the largest size they ever had.
package originset

// Drained empties the set m. A map keeps the room of its largest size,
// and clearing or ranging over it costs that: a large one is made anew.
func Drained(m map[uint64]bool) map[uint64]bool {
	if len(m) > 64 {
		return map[uint64]bool{}
	}
	clear(m)
	return m
}

// Compacted is the set m, copied into a map of its size when it holds
// less than a quarter of its largest size (*peak) since the last copy, so
// that ranging over it costs what it holds (see Drained).
func Compacted(m map[uint64]bool, peak *int) map[uint64]bool {
	if len(m) > 64 && len(m) < *peak/4 {
		c := make(map[uint64]bool, len(m)) // (maps.Clone keeps the room)
		for o := range m {
			c[o] = true
		}
		m, *peak = c, 0
	}
	*peak = max(*peak, len(m))
	return m
}
