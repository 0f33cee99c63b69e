package pubsub

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPrefixOf: the prefix of a BCAST client's sorted, non-overlapping
// prefixes a name is under.
func TestPrefixOf(t *testing.T) {
	for _, tc := range []struct {
		prefixes []string
		name     string
		want     string
		ok       bool
	}{
		{[]string{""}, "t:k", "", true},
		{[]string{"a:", "b:", "t:"}, "t:k", "t:", true},
		{[]string{"a:", "b:", "t:"}, "b:", "b:", true},
		{[]string{"a:", "b:", "t:"}, "c:k", "", false},
		{[]string{"a:", "b:", "t:"}, "a", "", false},
		{[]string{"a:", "b:", "t:"}, "", "", false},
		{[]string{"t:a", "t:b"}, "t:az", "t:a", true},
		{[]string{"t:a", "t:b"}, "t:", "", false},
		{[]string{"t:a", "t:b"}, "t:c", "", false},
		{[]string{"t:a", "t:bc", "t:bd"}, "t:bcz", "t:bc", true},
		{[]string{"t:a", "t:bc", "t:bd"}, "t:bz", "", false},
	} {
		if p, ok := prefixOf(tc.prefixes, tc.name); p != tc.want || ok != tc.ok {
			t.Errorf("prefixOf(%q, %q) = %q, %v; want %q, %v", tc.prefixes, tc.name, p, ok, tc.want, tc.ok)
		}
	}
}

// TestPrefixOfManyPrefixes: the follower asks prefixOf of every changed
// key for every BCAST client, so its cost must not grow with a client's
// prefixes (one reader's 30,000 prefixes cut every writer's SETs from
// 170,000 a second to 30,000 when it walked them all): 10^5 names
// against 10^6 prefixes, 10^11 compares for a walk, are answered at once.
func TestPrefixOfManyPrefixes(t *testing.T) {
	prefixes := make([]string, 1_000_000)
	for i := range prefixes {
		prefixes[i] = fmt.Sprintf("p%07d:", i)
	}
	slices.Sort(prefixes)
	done := make(chan int, 1)
	go func() {
		n := 0
		for i := range 100_000 {
			if _, ok := prefixOf(prefixes, fmt.Sprintf("p%07d:k", i*10)); ok {
				n++
			}
		}
		done <- n
	}()
	select {
	case n := <-done:
		if n != 100_000 {
			t.Fatalf("%d names of 100000 found under their prefix", n)
		}
	case <-time.After(time.Minute):
		t.Fatal("10^5 lookups among 10^6 prefixes still running after a minute")
	}
	if _, ok := prefixOf(prefixes, strings.Repeat("z", 10)); ok {
		t.Fatal("a name under no prefix was found under one")
	}
}

// TestFirstOverlapAgreesWithPairs: firstOverlap names the pair Redis's
// checkPrefixCollisionsOrReply names by comparing every pair, on random
// short prefixes where that is cheap.
func TestFirstOverlapAgreesWithPairs(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	gen := func() string {
		b := make([]byte, r.IntN(4))
		for i := range b {
			b[i] = "ab"[r.IntN(2)]
		}
		return string(b)
	}
	for range 100_000 {
		var old []string
		for range r.IntN(4) {
			if p := gen(); !slices.ContainsFunc(old, func(o string) bool { return overlap(o, p) }) {
				old = append(old, p)
			}
		}
		slices.Sort(old)
		prefixes := make([]string, r.IntN(6))
		for i := range prefixes {
			prefixes[i] = gen()
		}
		gi, gold, gok := firstOverlap(old, prefixes)
		wi, wold, wok := pairwiseOverlap(old, prefixes)
		if gi != wi || gold != wold || gok != wok {
			t.Fatalf("firstOverlap(%q, %q) = %d %q %v, comparing every pair says %d %q %v", old, prefixes, gi, gold, gok, wi, wold, wok)
		}
	}
}

// TestFirstOverlapManyPrefixes: 32,767 prefixes (the most one command
// holds), the overlapping pair last, over as many the client has, are
// checked at once: comparing every pair took a core for 100 s.
func TestFirstOverlapManyPrefixes(t *testing.T) {
	const n = 32_767
	old := make([]string, n)
	prefixes := make([]string, n)
	for i := range n {
		old[i] = fmt.Sprintf("old%06d:", i)
		prefixes[i] = fmt.Sprintf("new%06d:", i)
	}
	prefixes[n-1] = "new000000:sub"
	done := make(chan int, 1)
	go func() {
		i, _, _ := firstOverlap(old, prefixes)
		done <- i
	}()
	select {
	case i := <-done:
		if i != 0 {
			t.Fatalf("first overlapping prefix %d, want 0 (new000000:, a prefix of the last)", i)
		}
	case <-time.After(time.Minute):
		t.Fatal("checking 32767 prefixes still running after a minute")
	}
}

// overlap says whether one of a and b is a prefix of the other.
func overlap(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }

// pairwiseOverlap is firstOverlap as Redis finds it: every new prefix
// against the client's, then against the new ones after it.
func pairwiseOverlap(old, prefixes []string) (int, string, bool) {
	for i, p := range prefixes {
		for _, o := range old {
			if overlap(o, p) {
				return i, o, true
			}
		}
		for _, q := range prefixes[i+1:] {
			if overlap(p, q) {
				return i, "", false
			}
		}
	}
	return -1, "", false
}
