//go:build pprofdebug

package main

import (
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime"
)

func init() {
	p := os.Getenv("CC_PPROF_SOCK")
	if p == "" {
		return
	}
	ln, err := net.Listen("unix", p)
	if err != nil {
		panic(err)
	}
	runtime.SetMutexProfileFraction(20)
	runtime.SetBlockProfileRate(20000)
	go http.Serve(ln, nil)
}
