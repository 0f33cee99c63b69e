package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
)

// options are mkdeb's flags.
type options struct {
	describe, arch, bin, gen, root, out string
	mtime                               time.Time
}

const (
	pkgName    = "cachecast"
	maintainer = "cachecast developers <cachecast@users.noreply.github.com>"
	docDir     = "/usr/share/doc/" + pkgName
)

var (
	describeRE = regexp.MustCompile(`^v?([0-9]+(?:\.[0-9A-Za-z]+)+)(?:-((?:rc|alpha|beta|pre)[0-9A-Za-z.]*))?(?:-([0-9]+)-g([0-9a-f]+))?(-dirty)?$`)
	hashRE     = regexp.MustCompile(`^([0-9a-f]{4,40})(-dirty)?$`)
)

// debVersion maps git describe's output to a Debian version that sorts as
// the source does: v1.2.3 is 1.2.3, v1.2.3-rc1 is 1.2.3~rc1 (before
// 1.2.3), 5 commits after v1.2.3 is 1.2.3+git5.g<hash> (after it); with no
// tag, 0.0.0+git.g<hash>. A tree with changes adds +dirty (.dirty after a
// +). The package is native: no Debian revision.
func debVersion(describe string) (string, error) {
	if m := describeRE.FindStringSubmatch(describe); m != nil {
		v := m[1]
		if m[2] != "" {
			v += "~" + m[2]
		}
		plus := "+"
		if m[3] != "" {
			v += "+git" + m[3] + ".g" + m[4]
			plus = "."
		}
		if m[5] != "" {
			v += plus + "dirty"
		}
		return v, nil
	}
	if m := hashRE.FindStringSubmatch(describe); m != nil {
		v := "0.0.0+git.g" + m[1]
		if m[2] != "" {
			v += ".dirty"
		}
		return v, nil
	}
	return "", fmt.Errorf("cannot make a Debian version of %q (git describe --tags --always --dirty prints v1.2.3, v1.2.3-4-gabc1234 or abc1234)", describe)
}

// build writes the package and returns its path.
func build(o options) (string, error) {
	version, err := debVersion(o.describe)
	if err != nil {
		return "", err
	}
	stage, err := os.MkdirTemp("", "mkdeb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)
	contents, err := stageFiles(o, version, stage)
	if err != nil {
		return "", err
	}
	scripts := func(name string) string { return filepath.Join(o.root, "packaging/deb", name) }
	info := nfpm.WithDefaults(&nfpm.Info{
		Name:          pkgName,
		Arch:          o.arch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Section:       "net",
		Priority:      "optional",
		Maintainer:    maintainer,
		Homepage:      "https://github.com/cachecast/cachecast",
		License:       "not-yet-chosen",
		MTime:         o.mtime,
		Description: `fleet-wide replicated key/value cache daemon
cachecastd keeps hot, fast-changing data (prices, first of all) identical
on every machine of a fleet: a local application publishes an update over a
Unix socket, the daemon appends it to its durable memory-mapped log and
fans it out to every node, and every node serves the same view from memory
over HTTP, the Redis protocol and a shared-memory file.

The package runs cachecastd under systemd as the user cachecast, with its
data in /var/lib/cachecast and its settings in /etc/default/cachecastd; the
command-line client is cachecast.`,
		Overridables: nfpm.Overridables{
			Depends:  []string{"systemd"},
			Contents: contents,
			Scripts: nfpm.Scripts{
				PostInstall: scripts("postinst"),
				PreRemove:   scripts("prerm"),
				PostRemove:  scripts("postrm"),
			},
		},
	})
	path := filepath.Join(o.out, deb.Default.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := deb.Default.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", err
	}
	return path, f.Close()
}

// stageFiles writes what the package holds that is made here (gzipped
// pages, the changelog, the unit with /usr/bin) into stage and returns
// every file of the package.
func stageFiles(o options, version, stage string) (files.Contents, error) {
	unit, err := os.ReadFile(filepath.Join(o.root, "systemd/cachecastd.service"))
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(unit, []byte("\nExecStart=/usr/local/bin/cachecastd\n")) {
		return nil, fmt.Errorf("systemd/cachecastd.service: no ExecStart=/usr/local/bin/cachecastd to point at /usr/bin")
	}
	staged := map[string][]byte{
		"cachecastd.service": bytes.ReplaceAll(unit, []byte("/usr/local/bin/"), []byte("/usr/bin/")),
		"changelog.gz":       gz([]byte(changelog(o, version))),
	}
	for _, page := range []string{"cachecastd.8", "cachecast.1"} {
		src, err := os.ReadFile(filepath.Join(o.gen, page))
		if err != nil {
			return nil, err
		}
		staged[page+".gz"] = gz(src)
	}
	for name, b := range staged {
		if err := os.WriteFile(filepath.Join(stage, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	in := func(dir, name string) string { return filepath.Join(dir, name) }
	sys := filepath.Join(o.root, "systemd")
	list := []struct {
		src, dst string
		mode     os.FileMode
		typ      string
	}{
		{in(o.bin, "cachecastd"), "/usr/bin/cachecastd", 0o755, ""},
		{in(o.bin, "cachecast"), "/usr/bin/cachecast", 0o755, ""},
		{in(stage, "cachecastd.service"), "/usr/lib/systemd/system/cachecastd.service", 0o644, ""},
		{in(sys, "cachecast.sysusers"), "/usr/lib/sysusers.d/cachecast.conf", 0o644, ""},
		{in(sys, "cachecast.tmpfiles"), "/usr/lib/tmpfiles.d/cachecast.conf", 0o644, ""},
		{in(sys, "cachecastd.env.example"), "/etc/default/cachecastd", 0o640, files.TypeConfig},
		{in(stage, "cachecastd.8.gz"), "/usr/share/man/man8/cachecastd.8.gz", 0o644, ""},
		{in(stage, "cachecast.1.gz"), "/usr/share/man/man1/cachecast.1.gz", 0o644, ""},
		{in(o.gen, "cachecast.bash"), "/usr/share/bash-completion/completions/cachecast", 0o644, ""},
		{in(o.gen, "cachecast.zsh"), "/usr/share/zsh/vendor-completions/_cachecast", 0o644, ""},
		{in(o.gen, "cachecast.fish"), "/usr/share/fish/vendor_completions.d/cachecast.fish", 0o644, ""},
		{filepath.Join(o.root, "packaging/deb/copyright"), docDir + "/copyright", 0o644, ""},
		{in(stage, "changelog.gz"), docDir + "/changelog.gz", 0o644, ""},
		{filepath.Join(o.root, "packaging/deb/lintian-overrides"), "/usr/share/lintian/overrides/" + pkgName, 0o644, ""},
	}
	var out files.Contents
	for _, f := range list {
		if _, err := os.Stat(f.src); err != nil {
			return nil, err
		}
		out = append(out, &files.Content{Source: f.src, Destination: f.dst, Type: f.typ,
			FileInfo: &files.ContentFileInfo{Mode: f.mode, Owner: "root", Group: "root"}})
	}
	return out, nil
}

// changelog is the package's Debian changelog: one entry for this build.
func changelog(o options, version string) string {
	return fmt.Sprintf("%s (%s) unstable; urgency=medium\n\n  * Built from %s (git describe).\n    The project's history: https://github.com/cachecast/cachecast/commits\n\n -- %s  %s\n",
		pkgName, version, strings.TrimSpace(o.describe), maintainer, o.mtime.Format("Mon, 02 Jan 2006 15:04:05 -0700"))
}

// gz compresses b as gzip -9n does: no name, no time stamp, so that the
// same input gives the same bytes.
func gz(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}
