package config

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

const (
	// envPrefix starts the environment variable of every flag.
	envPrefix = "CACHECAST_"

	// envAnnotation marks the flags that ApplyEnv reads from the
	// environment, so that --help and --version of a main are left alone.
	envAnnotation = "cachecast-env"
)

// EnvName is the environment variable of a flag: CACHECAST_ then the flag's
// name in upper case with dashes as underscores (data-dir: CACHECAST_DATA_DIR).
func EnvName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// ApplyEnv sets each flag that AddFlags registered and the command line did
// not give: from the env file (--env-file, or CACHECAST_ENV_FILE) if there is
// one, else from the environment variable CACHECAST_<FLAG> found by lookup
// (os.LookupEnv in cmd/cachecastd). So the command line wins over the env
// file, which wins over the process environment (under systemd, the process
// environment is the EnvironmentFile as it was at start; the env file is read
// fresh on every SIGHUP). Call it after fs.Parse.
func ApplyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	var file map[string]string
	if f := fs.Lookup("env-file"); f != nil {
		path := f.Value.String()
		if !f.Changed {
			path, _ = lookup(EnvName("env-file"))
			if path != "" {
				if err := fs.Set("env-file", path); err != nil {
					return err
				}
			}
		}
		if path != "" {
			var err error
			if file, err = ReadEnvFile(path); err != nil {
				return fmt.Errorf("--env-file: %w", err)
			}
		}
	}
	var firstErr error
	fs.VisitAll(func(f *pflag.Flag) {
		names := f.Annotations[envAnnotation]
		if firstErr != nil || len(names) == 0 || f.Changed || f.Name == "env-file" {
			return
		}
		name := names[0]
		v, ok := file[name]
		from := name + " (from " + fs.Lookup("env-file").Value.String() + ")"
		if !ok {
			v, ok = lookup(name)
			from = name
		}
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			firstErr = fmt.Errorf("%s: invalid value %q for --%s: %v", from, v, f.Name, err)
		}
	})
	return firstErr
}

// UnknownEnv names the CACHECAST_ variables that no flag of fs reads: in
// environ (KEY=value strings, as os.Environ gives them) and in the env
// file that fs's --env-file names, sorted, those of the file with the
// file's name after them ("CACHECAST_MAX_VALU_SIZE (in /etc/default/cachecastd)").
// A typo there would otherwise leave the setting at its default without a
// word. Call it after ApplyEnv, which has checked that the file reads.
func UnknownEnv(fs *pflag.FlagSet, environ []string) []string {
	known := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		if names := f.Annotations[envAnnotation]; len(names) > 0 {
			known[names[0]] = true
		}
	})
	var unknown []string
	var file map[string]string
	if f := fs.Lookup("env-file"); f != nil && f.Value.String() != "" {
		file, _ = ReadEnvFile(f.Value.String())
		for k := range file {
			if strings.HasPrefix(k, envPrefix) && !known[k] {
				unknown = append(unknown, k+" (in "+f.Value.String()+")")
			}
		}
	}
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		_, inFile := file[k] // under systemd the environment is the file again
		if strings.HasPrefix(k, envPrefix) && !known[k] && !inFile {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	return slices.Compact(unknown)
}

// ReadEnvFile reads a file in the syntax of systemd's EnvironmentFile: one
// KEY=value a line, blank lines and lines starting with # or ; ignored, an
// optional "export " prefix, values optionally in single or double quotes.
// Keys not starting with CACHECAST_ are kept too; ApplyEnv ignores them.
func ReadEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := make(map[string]string)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("%s:%d: not KEY=value: %q", filepath.Base(path), n, line)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		env[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return env, nil
}
