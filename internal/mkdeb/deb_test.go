package main

import "testing"

func TestDebVersion(t *testing.T) {
	for _, tt := range []struct{ describe, want string }{
		{"v1.2.3", "1.2.3"},
		{"1.2.3", "1.2.3"},
		{"v1.2.3-dirty", "1.2.3+dirty"},
		{"v1.2.3-rc1", "1.2.3~rc1"},
		{"v1.2.3-5-gabc1234", "1.2.3+git5.gabc1234"},
		{"v1.2.3-rc1-5-gabc1234-dirty", "1.2.3~rc1+git5.gabc1234.dirty"},
		{"v2.0-12-g0123abc", "2.0+git12.g0123abc"},
		{"115dd96", "0.0.0+git.g115dd96"},
		{"115dd96-dirty", "0.0.0+git.g115dd96.dirty"},
		{"1234567", "0.0.0+git.g1234567"},
	} {
		got, err := debVersion(tt.describe)
		if err != nil || got != tt.want {
			t.Errorf("debVersion(%q) = %q, %v; want %q", tt.describe, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "dev", "v1", "release-1.2", "v1.2.3 extra"} {
		if got, err := debVersion(bad); err == nil {
			t.Errorf("debVersion(%q) = %q, want an error", bad, got)
		}
	}
}
