// Command benchsatellite reads the output of test/bench-satellite.sh (the
// `go test -bench` lines of SkyWalking Satellite's mmap-queue benchmarks and
// of the store's, each run preceded by a "# fs=NAME round=N" line) and
// prints the side-by-side table of BENCHMARKS.md: per configuration and file
// system, the median ns/op over the rounds of Satellite and of the store,
// and Satellite's time divided by ours (how many times faster we are); and
// the default-segment append against BenchmarkMapCopyProbe, the rate of a
// plain copy into fresh mappings.
//
//	go run ./test/benchsatellite < raw.txt
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// pair names the two benchmarks that are compared: the other one (its
// column named by other: Satellite's, or the plain-copy probe's) and ours.
type pair struct{ title, other, otherBench, ours string }

var pairs = []pair{
	{"append: Satellite BenchmarkEnqueue vs our BenchmarkAppend", "Satellite", "BenchmarkEnqueue", "BenchmarkAppend"},
	{"append + read: Satellite BenchmarkEnqueueAndDequeue vs our BenchmarkAppendRead", "Satellite", "BenchmarkEnqueueAndDequeue", "BenchmarkAppendRead"},
	{"default segments: BenchmarkMapCopyProbe (copy into fresh mappings, msync every 100 ms) vs our BenchmarkAppend; the ratio is the fraction of the probe's rate we reach", "probe", "BenchmarkMapCopyProbe", "BenchmarkAppend"},
}

var (
	fsLine    = regexp.MustCompile(`^# fs=(\S+) round=(\d+)`)
	benchLine = regexp.MustCompile(`^(Benchmark[A-Za-z]+)/(\S+?)(-\d+)?\s+\d+\s+([0-9.]+) ns/op`)
	// Satellite: segmentSize:_128KB_maxInMemSegments:18_message:8KB_queueCapacity:10000
	satName = regexp.MustCompile(`^segmentSize:_(\d+KB)_maxInMemSegments:(\d+)_message:(\d+KB)_`)
	// Ours: size=8KB/segment=128KB/mapped=18
	ourName = regexp.MustCompile(`^size=(\w+)/segment=(\w+)/mapped=(\d+)$`)
)

// config is one benchmark configuration in the table's words.
type config struct{ size, segment, mapped string }

func (c config) String() string {
	return fmt.Sprintf("%s records, segment %s, mapped %s", c.size, c.segment, c.mapped)
}

// key is one cell's samples: a benchmark, a configuration, a file system.
type key struct {
	bench string
	cfg   config
	fs    string
}

func main() {
	samples, fsOrder, cfgOrder, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchsatellite:", err)
		os.Exit(1)
	}
	if len(samples) == 0 {
		fmt.Fprintln(os.Stderr, "benchsatellite: no benchmark lines in the input")
		os.Exit(1)
	}
	for _, p := range pairs {
		rows := cfgOrder[:0:0]
		for _, c := range cfgOrder {
			for _, fs := range fsOrder {
				if len(samples[key{p.otherBench, c, fs}]) > 0 {
					rows = append(rows, c)
					break
				}
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Printf("\n%s (median ns/op of %s; ratio = %s / ours)\n\n", p.title, roundsOf(samples), p.other)
		fmt.Print("| case |")
		for _, fs := range fsOrder {
			fmt.Printf(" %s %s | ours %s | ratio |", p.other, fs, fs)
		}
		fmt.Print("\n|---|")
		for range fsOrder {
			fmt.Print("---|---|---|")
		}
		fmt.Println()
		for _, c := range rows {
			fmt.Printf("| %s |", c)
			for _, fs := range fsOrder {
				s, sok := median(samples[key{p.otherBench, c, fs}])
				o, ook := median(samples[key{p.ours, c, fs}])
				fmt.Printf(" %s | %s |", dur(s, sok), dur(o, ook))
				if sok && ook && o > 0 {
					fmt.Printf(" %.2fx |", s/o)
				} else {
					fmt.Print(" - |")
				}
			}
			fmt.Println()
		}
	}
}

// parse collects the ns/op samples per cell and the order in which file
// systems and configurations first appear.
func parse(r io.Reader) (map[key][]float64, []string, []config, error) {
	samples := map[key][]float64{}
	var fsOrder []string
	var cfgOrder []config
	seenFS, seenCfg := map[string]bool{}, map[config]bool{}
	fs := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := fsLine.FindStringSubmatch(line); m != nil {
			fs = m[1]
			if !seenFS[fs] {
				seenFS[fs] = true
				fsOrder = append(fsOrder, fs)
			}
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if fs == "" {
			return nil, nil, nil, fmt.Errorf("benchmark line before any \"# fs=\" line: %q", line)
		}
		var c config
		if n := satName.FindStringSubmatch(m[2]); n != nil {
			c = config{size: n[3], segment: n[1], mapped: n[2]}
		} else if n := ourName.FindStringSubmatch(m[2]); n != nil {
			c = config{size: n[1], segment: n[2], mapped: n[3]}
		} else {
			continue
		}
		ns, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("ns/op in %q: %w", line, err)
		}
		if !seenCfg[c] {
			seenCfg[c] = true
			cfgOrder = append(cfgOrder, c)
		}
		k := key{m[1], c, fs}
		samples[k] = append(samples[k], ns)
	}
	return samples, fsOrder, cfgOrder, sc.Err()
}

// roundsOf says how many samples the cells hold ("3 rounds", or a range
// when a run was cut short).
func roundsOf(samples map[key][]float64) string {
	lo, hi := -1, 0
	for _, v := range samples {
		if lo < 0 || len(v) < lo {
			lo = len(v)
		}
		hi = max(hi, len(v))
	}
	if lo == hi {
		return fmt.Sprintf("%d rounds", hi)
	}
	return fmt.Sprintf("%d-%d rounds", lo, hi)
}

func median(v []float64) (float64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// dur prints nanoseconds as the table does: µs with three digits.
func dur(ns float64, ok bool) string {
	if !ok {
		return "-"
	}
	us := ns / 1e3
	switch {
	case us >= 100:
		return strconv.FormatFloat(us, 'f', 0, 64) + " µs"
	case us >= 10:
		return strconv.FormatFloat(us, 'f', 1, 64) + " µs"
	}
	return strings.TrimSuffix(strconv.FormatFloat(us, 'f', 2, 64), "0") + " µs"
}
