//go:build !race

package localview_test

const raceEnabled = false
