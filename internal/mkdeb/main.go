// Command mkdeb builds cachecast's Debian package with nfpm (as a
// library): the two binaries, the systemd unit with ExecStart in /usr/bin,
// the sysusers.d and tmpfiles.d files, /etc/default/cachecastd as a
// conffile, the manual pages and completion scripts the binaries print,
// the copyright and a changelog, and the maintainer scripts of
// packaging/deb. `make deb` runs it:
//
//	go run ./internal/mkdeb -describe "$(git describe --tags --always --dirty)" \
//	    -arch amd64 -bin bin/linux-amd64 -gen bin/deb -out bin
//
// It prints the path of the package it wrote.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.describe, "describe", "", "the source's version as git describe --tags --always --dirty prints it")
	flag.StringVar(&o.arch, "arch", "amd64", "Debian architecture of the binaries (amd64, arm64)")
	flag.StringVar(&o.bin, "bin", "bin", "directory of the cachecastd and cachecast binaries to pack")
	flag.StringVar(&o.gen, "gen", "", "directory of the files the binaries printed: cachecastd.8, cachecast.1, cachecast.bash, cachecast.zsh, cachecast.fish")
	flag.StringVar(&o.root, "root", ".", "the source tree (systemd/ and packaging/deb/)")
	flag.StringVar(&o.out, "out", "bin", "directory to write the package to")
	epoch := flag.Int64("mtime", 0, "time of the files and the changelog entry, Unix seconds (the last commit's); 0: now")
	flag.Parse()
	o.mtime = time.Now().UTC().Truncate(time.Second)
	if *epoch != 0 {
		o.mtime = time.Unix(*epoch, 0).UTC()
	}
	path, err := build(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mkdeb: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(path)
}
