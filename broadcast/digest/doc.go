// Package digest is one node's side of the anti-entropy exchanges of
// package broadcast on protocol 5 and later: the digest tree of the
// version vector, the sums kept as the vector changes (Index), the cut
// the sums are compared at (protocol 6), and the answer to each sums or
// entries frame (Index.Answer), with those frames' payloads. It reads
// the store through two small interfaces (VectorSource, Feed) and a
// stamp function, and writes nothing: the node carries the frames and
// pulls what the answers say it lacks.
//
// # Digests
//
// On protocol 5 an exchange sends digests first, and entries only where
// the vectors differ (tree.go). The live origins are the leaves of a
// tree: an origin's place is a 64-bit hash of its ID, a node at depth d
// holds the origins whose hashes share their first 4×d bits (so 16
// children a node), and its sum is how many origins it holds and the XOR
// of a 64-bit hash of each (origin, seq). The dialer opens with the
// root's sum and its retired summary (a sums frame); each side compares
// the sums it receives with its own, node by node: an equal node is
// settled (and, if not marked final, echoed back final so that the other
// side learns it is equal too), a differing node is answered with its 16
// children's sums, or, when it holds at most 16 origins on both sides (or
// none on one), with its entries (an entries frame), which the other side
// answers with its own under the same nodes. So each side learns the
// other's whole vector (its own entries where the sums were equal, the
// other's where they differed) and pulls what it lacks, as with whole vectors.
//
// On protocol 6 the sums compare the vectors at a cut (cut.go): the
// opening carries an HLC stamp, the dialer's wall clock less
// 2×SyncInterval rounded down to a SyncInterval (so the cut is 2-3 s
// back by default, and the exchanges of one interval share it), every
// sums frame of the exchange carries it back and forth, and both sides
// sum, for each origin, the highest seq they hold whose record is
// stamped at or before it (an origin with none is left out). A record's
// stamp is its origin's and an origin's stamps grow with its seqs, so
// two nodes that hold the same records up to the cut have equal sums,
// whatever either holds after it: the records still on their way (the
// write rate times the delivery lag, all origins at once under load)
// make no difference. A real gap shows once the cut passes it, 2-3
// SyncIntervals after the missing record was stamped, and is found and
// pulled as before; where sums differ, entries frames carry each side's
// highest seqs, not the cut's, so a side pulls all the other holds. A
// gap that announces itself is looked for at once: a node offered a
// record past a gap (the store refuses it as out of order: one before it
// was lost on its way, as NATS may lose one, or the node was down) gives
// that origin a value in its sums that no peer's has, until it holds the
// record (at most 6 SyncIntervals, by when any cut has passed it), so
// its next exchange reaches the origin's entries, learns a peer's
// highest seq and pulls, young records or not. And a node's own
// exchanges compare whole vectors (the cut digest.NoCut) for its first 6
// SyncIntervals: one that just (re)started lacks what was written while
// it was down, the youngest of it younger than any cut, with perhaps
// nothing written since to announce it. An
// origin that stopped writing is compared at its last seq once that is
// older than the cut, and the retired origins at their last seqs, as
// before. "Old" is the dialer's clock against the origin's stamps: an
// origin whose clock runs ahead by up to --max-clock-offset (the store
// holds records stamped further ahead) has its records counted that
// much later, one behind that much sooner (a record then counts while
// still on its way: a difference, pulled, as on protocol 5). A dialer
// whose clock is far behind compares at an old cut, and misses the
// newer gaps on its own exchanges, but the peers that dial it find them
// at their cuts, and it learns and pulls them as their listener. A
// record this node cannot read back (recycled, or below a snapshot it
// bootstrapped from) counts as old. A node keeps its live vector's sums
// and those at its last 4 cuts (sums.go), each cut with each origin's
// head at the time, and updates them only for the origins that changed:
// those the store's change feed names (store.VectorFeed: appends, a
// bootstrap's moves, a record set aside or back), those retired or live
// again, and, when a cut moves on to a later one, those whose head was
// past it. An origin's cut is searched again only when its head moves
// while at or below the cut or the cut passes records of it (a galloping
// search down from the head, about 2 log2(k) stamp reads for k records
// past it), so most frames read no stamp at all.
//
// What an exchange costs: idle (equal vectors) one sum each way, 84
// bytes a frame with the MAC, whatever N (92 on protocol 6). With d
// origins differing, about d × (2 × 16 sums × log16(N/16) levels + 2 ×
// 17 entries): for one difference among 1,000 origins some 85 sums and
// entries, 1.8 kB, against 16 kB each way for the whole vector, in 2 +
// log16(N/16) round trips on the open connection (4 at N = 1,000,
// milliseconds on a LAN) instead of one. So a node handles about
// 2×Fanout×2 sums a round when idle, flat in N, and on protocol 6 as
// much under load (d counts only the origins with a real gap older than
// the cut; BENCHMARKS.md); on protocol 5, d counts every origin with
// records in flight, and an exchange then costs about what the whole
// vector did. The rounds to convergence are those above, plus the cut's
// 2-3 SyncIntervals for a record no push delivered: the digests change
// what a round sends, not whom it reaches. The CPU per frame does not
// grow with N: its sums are read from the tree of sums kept (a node's
// sum is at most log16(N) steps away), and what the other side is
// learned to hold where the sums are equal (Step.Whole, the seen marks) is merged only
// as far as it changed since that link last learned all of those sums;
// so a frame costs its own nodes and entries and the origins that
// changed since (BenchmarkDigestAnswer: about 0.6 µs for an idle frame
// at 100 to 4,000 origins, against a pass over the vector of 0.3-0.4 µs
// an origin before). An equal sum is
// wrong with probability 2^-64 per comparison (a difference then waits
// for the vectors to change again).
package digest
