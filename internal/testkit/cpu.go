package testkit

import "syscall"

// ProcessCPU is the CPU time this process has used so far, user and
// system, in nanoseconds: a benchmark's cost per operation that holds on a
// loaded machine, where its rate does not.
func ProcessCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
