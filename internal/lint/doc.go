// Package lint holds the tests that keep rules of the house over the
// whole module, rules that go vet does not check: no function of the
// production code is longer than maxFuncLines lines (see funclen_test.go).
// It has no code of its own.
package lint
