//go:build race

package localview_test

const raceEnabled = true
