package systemd

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
)

const (
	unitFile     = "cachecastd.service"
	sysusersFile = "cachecast.sysusers"
	tmpfilesFile = "cachecast.tmpfiles"
	envExample   = "cachecastd.env.example"

	// maxExposure is the highest overall exposure `systemd-analyze
	// security` may give the unit: "OK" is below 2.0 on its 0..10 scale.
	maxExposure = 2.0
)

// tool finds a systemd program or fails the test saying how to get it.
func tool(t *testing.T, name string) string {
	t.Helper()
	return testkit.NeedTool(t, name, "systemd")
}

// unit is a parsed unit file: section -> key -> values in order.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, text string) unit {
	t.Helper()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.HasSuffix(line, `\`) {
				t.Fatalf("%s:%d: not Key=Value in a section: %q", unitFile, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// last is the effective value of a single-valued setting.
func (u unit) last(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// env is the unit's Environment= assignments.
func (u unit) env() map[string]string {
	m := map[string]string{}
	for _, v := range u["Service"]["Environment"] {
		for _, kv := range strings.Fields(v) {
			k, val, _ := strings.Cut(strings.Trim(kv, `"`), "=")
			m[k] = val
		}
	}
	return m
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// testableUnit writes a copy of the unit into a scratch directory with
// ExecStart pointed at a binary that exists (this test's own), since
// cachecastd is not installed where the unit expects it. It returns the
// copy's path. edit, if not nil, changes the text further.
func testableUnit(t *testing.T, edit func(string) string) string {
	t.Helper()
	text := readFile(t, unitFile)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "\nExecStart=/usr/local/bin/cachecastd\n") {
		t.Fatalf("%s: no ExecStart=/usr/local/bin/cachecastd line to redirect", unitFile)
	}
	text = strings.Replace(text, "\nExecStart=/usr/local/bin/cachecastd\n", "\nExecStart="+self+"\n", 1)
	if edit != nil {
		text = edit(text)
	}
	p := filepath.Join(t.TempDir(), unitFile)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func verify(t *testing.T, analyze, path string) (string, error) {
	cmd := exec.Command(analyze, "verify", "--man=no", path)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestUnitVerifies(t *testing.T) {
	analyze := tool(t, "systemd-analyze")
	out, err := verify(t, analyze, testableUnit(t, nil))
	if err != nil || out != "" {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
	// The check has teeth: a broken copy is refused.
	bad := testableUnit(t, func(s string) string { return strings.Replace(s, "Type=notify", "Type=notifyy", 1) })
	if out, err := verify(t, analyze, bad); err == nil && out == "" {
		t.Fatal("systemd-analyze verify passed a unit with Type=notifyy: the test cannot tell good from bad")
	}
}

var exposureRE = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)

func TestUnitSecurity(t *testing.T) {
	analyze := tool(t, "systemd-analyze")
	cmd := exec.Command(analyze, "security", "--offline=true", "--no-pager", testableUnit(t, nil))
	out, err := cmd.CombinedOutput()
	m := exposureRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security --offline=true: %v (systemd 250 or later is needed)\n%s", err, out)
	}
	exposure, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("overall exposure %.1f", exposure)
	if exposure > maxExposure {
		t.Errorf("exposure %.1f is above %.1f:\n%s", exposure, maxExposure, out)
	}
}

func TestUnitSettings(t *testing.T) {
	u := parseUnit(t, readFile(t, unitFile))
	for _, tt := range []struct{ section, key, want string }{
		{"Service", "Type", "notify"},
		{"Service", "NotifyAccess", "main"},
		{"Service", "User", "cachecast"},
		{"Service", "Group", "cachecast"},
		{"Service", "StateDirectory", "cachecast"},
		{"Service", "RuntimeDirectory", "cachecast"},
		{"Service", "EnvironmentFile", "-/etc/default/cachecastd"},
		{"Service", "ExecStart", "/usr/local/bin/cachecastd"},
		{"Service", "ExecReload", "/bin/kill -HUP $MAINPID"},
		{"Service", "Restart", "on-failure"},
		{"Service", "WatchdogSec", "30s"},
		{"Service", "UMask", "0007"},
		{"Service", "NoNewPrivileges", "yes"},
		{"Service", "ProtectSystem", "strict"},
		{"Service", "ProtectHome", "yes"},
		{"Service", "PrivateTmp", "yes"},
		{"Service", "PrivateDevices", "yes"},
		{"Service", "ProtectKernelTunables", "yes"},
		{"Service", "ProtectKernelModules", "yes"},
		{"Service", "ProtectKernelLogs", "yes"},
		{"Service", "ProtectControlGroups", "yes"},
		{"Service", "RestrictNamespaces", "yes"},
		{"Service", "LockPersonality", "yes"},
		{"Service", "MemoryDenyWriteExecute", "yes"},
		{"Service", "SystemCallArchitectures", "native"},
		{"Install", "WantedBy", "multi-user.target"},
	} {
		if got := u.last(tt.section, tt.key); got != tt.want {
			t.Errorf("[%s] %s=%q, want %q", tt.section, tt.key, got, tt.want)
		}
	}
	for _, key := range []string{"TimeoutStopSec", "LimitNOFILE"} {
		if u.last("Service", key) == "" {
			t.Errorf("[Service] %s is not set", key)
		}
	}
	fams := strings.Fields(u.last("Service", "RestrictAddressFamilies"))
	for _, f := range []string{"AF_UNIX", "AF_INET", "AF_INET6"} {
		if !contains(fams, f) {
			t.Errorf("RestrictAddressFamilies lacks %s: the daemon needs it", f)
		}
	}
	// Not PrivateUsers: SO_PEERCRED would see every client as nobody.
	if v := u.last("Service", "PrivateUsers"); v != "" && v != "no" {
		t.Errorf("PrivateUsers=%s breaks --allow-uids", v)
	}

	// The paths agree with the directories systemd makes.
	env := u.env()
	if got, want := env["CACHECAST_DATA_DIR"], "/var/lib/"+u.last("Service", "StateDirectory"); got != want {
		t.Errorf("CACHECAST_DATA_DIR=%q, want the StateDirectory %q", got, want)
	}
	if got, want := filepath.Dir(env["CACHECAST_SOCKET"]), "/run/"+u.last("Service", "RuntimeDirectory"); got != want || env["CACHECAST_SOCKET"] != "/run/cachecast/cachecast.sock" {
		t.Errorf("CACHECAST_SOCKET=%q, want /run/cachecast/cachecast.sock in the RuntimeDirectory %q", env["CACHECAST_SOCKET"], want)
	}
	if got, want := env["CACHECAST_ENV_FILE"], strings.TrimPrefix(u.last("Service", "EnvironmentFile"), "-"); got != want {
		t.Errorf("CACHECAST_ENV_FILE=%q, want the EnvironmentFile %q (so that reload reads it)", got, want)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// passwdEntry finds name in an /etc/passwd or /etc/group file.
func passwdEntry(t *testing.T, path, name string) []string {
	t.Helper()
	for _, line := range strings.Split(readFile(t, path), "\n") {
		if f := strings.Split(line, ":"); f[0] == name {
			return f
		}
	}
	t.Fatalf("%s has no entry %q", path, name)
	return nil
}

// TestSysusersTmpfiles applies the two snippets to a scratch root, as
// systemd-sysusers and systemd-tmpfiles do at boot (or after install), and
// checks the result. Owners can only be set by root; run as another user,
// the test checks what was created but not the owners, nor the adjustment
// of a file that was already there, and says so.
func TestSysusersTmpfiles(t *testing.T) {
	sysusers, tmpfiles := tool(t, "systemd-sysusers"), tool(t, "systemd-tmpfiles")
	abs := func(name string) string {
		p, err := filepath.Abs(name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sysusers, "--root="+root, abs(sysusersFile)).CombinedOutput(); err != nil {
		t.Fatalf("systemd-sysusers: %v\n%s", err, out)
	}
	pw := passwdEntry(t, filepath.Join(root, "etc/passwd"), "cachecast")
	if pw[4] != "cachecast daemon" || pw[5] != "/var/lib/cachecast" || !strings.HasSuffix(pw[6], "nologin") {
		t.Errorf("passwd entry %q", strings.Join(pw, ":"))
	}
	uid, _ := strconv.Atoi(pw[2])
	gid, _ := strconv.Atoi(pw[3])
	if uid == 0 || uid >= 1000 {
		t.Errorf("uid %d is not a system uid", uid)
	}
	if gr := passwdEntry(t, filepath.Join(root, "etc/group"), "cachecast"); gr[2] != pw[3] {
		t.Errorf("group cachecast has gid %s, the user's group is %s", gr[2], pw[3])
	}

	// An environment file already there keeps its content; its mode and
	// group are set so that the daemon can read it.
	envPath := filepath.Join(root, "etc/default/cachecastd")
	if err := os.MkdirAll(filepath.Dir(envPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(envPath, []byte("CACHECAST_LOG_LEVEL=debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	asRoot := os.Geteuid() == 0
	out, err := exec.Command(tmpfiles, "--root="+root, "--create", abs(tmpfilesFile)).CombinedOutput()
	if asRoot && err != nil {
		t.Fatalf("systemd-tmpfiles: %v\n%s", err, out)
	}
	if !asRoot {
		// Only the chown calls may fail.
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" && !strings.Contains(line, "Operation not permitted") {
				t.Fatalf("systemd-tmpfiles: %v\n%s", err, out)
			}
		}
		t.Log("not root: owners, and the adjustment of an existing file, not checked")
	}
	check := func(path string, dir bool, mode os.FileMode, wantUID, wantGID int) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.IsDir() != dir || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v, want dir=%v mode %v", path, fi.Mode(), dir, mode)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if asRoot && (int(st.Uid) != wantUID || int(st.Gid) != wantGID) {
			t.Errorf("%s: owner %d:%d, want %d:%d", path, st.Uid, st.Gid, wantUID, wantGID)
		}
	}
	check(filepath.Join(root, "var/lib/cachecast"), true, 0o750, uid, gid)
	if asRoot { // without root, tmpfiles cannot adjust a file it did not create
		check(envPath, false, 0o640, 0, gid)
	}
	if got := readFile(t, envPath); got != "CACHECAST_LOG_LEVEL=debug\n" {
		t.Errorf("tmpfiles changed the environment file's content: %q", got)
	}
	// And it creates the file when there is none.
	if err := os.Remove(envPath); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tmpfiles, "--root="+root, "--create", abs(tmpfilesFile)).CombinedOutput(); asRoot && err != nil {
		t.Fatalf("systemd-tmpfiles: %v\n%s", err, out)
	}
	check(envPath, false, 0o640, 0, gid)
}

var envLineRE = regexp.MustCompile(`^#(CACHECAST_[A-Z0-9_]+)=(.*)$`)

// exampleEnv reads the example: every setting is a commented-out
// CACHECAST_X=default line; nothing is set.
func exampleEnv(t *testing.T) map[string]string {
	t.Helper()
	vars := map[string]string{}
	for n, line := range strings.Split(readFile(t, envExample), "\n") {
		if line == "" {
			continue
		}
		if line[0] != '#' {
			t.Errorf("%s:%d: not commented out: %q", envExample, n+1, line)
			continue
		}
		if m := envLineRE.FindStringSubmatch(line); m != nil {
			if _, dup := vars[m[1]]; dup {
				t.Errorf("%s:%d: %s twice", envExample, n+1, m[1])
			}
			vars[m[1]] = m[2]
		} else if strings.Contains(line, "CACHECAST_") && strings.Contains(line, "=") && !strings.HasPrefix(line, "# ") {
			t.Errorf("%s:%d: malformed setting %q", envExample, n+1, line)
		}
	}
	return vars
}

func TestEnvExample(t *testing.T) {
	vars := exampleEnv(t)
	// The flags issue 3 names, at least.
	for _, flag := range []string{
		"data-dir", "socket", "node-name", "flush", "flush-interval", "segment-size",
		"max-mapped-segments", "retention-bytes", "retention-age", "max-value-size",
		"metrics-addr", "socket-mode", "allow-uids", "allow-gids", "log-level", "log-format",
	} {
		name := "CACHECAST_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
		if _, ok := vars[name]; !ok {
			t.Errorf("%s lacks %s (--%s)", envExample, name, flag)
		}
	}
	// Where the unit sets a variable, the example shows the unit's value.
	u := parseUnit(t, readFile(t, unitFile))
	for k, v := range u.env() {
		if got, ok := vars[k]; !ok || got != v {
			t.Errorf("%s shows %s=%q, the unit sets %q", envExample, k, got, v)
		}
	}
	// And the environment file the unit reads is the one the example
	// names.
	if got, want := vars["CACHECAST_ENV_FILE"], strings.TrimPrefix(u.last("Service", "EnvironmentFile"), "-"); got != want {
		t.Errorf("CACHECAST_ENV_FILE=%q, the unit's EnvironmentFile is %q", got, want)
	}
}
