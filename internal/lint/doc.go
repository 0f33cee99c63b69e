// Package lint holds the tests that keep rules of the house over the
// whole module, rules that go vet does not check: no function of the
// production code is longer than maxFuncLines lines (funclen_test.go), and
// a package over maxPackageLines lines of non-test code says in its
// package doc how large it is and why, within sizeDrift of its real size
// (pkgsize_test.go). It has no code of its own.
package lint
