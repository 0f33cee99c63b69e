// Package config is a cachecast daemon's configuration: Config, its
// defaults (Default) and its rules (Validate), from one declaration per
// setting (the table in settings.go: the field, the flag, its help,
// whether SIGHUP applies it, the store option it sets, its own rule).
// From that table come the flags (AddFlags), the environment variables
// (EnvName, ApplyEnv, an --env-file by ReadEnvFile), what a reload
// applies (ReloadFlags, Changed), the store's options (StoreOptions, the
// storage rules being the store's own, checked once) and so the manual
// page and docs/configuration.md, which tests check against the table
// (TestFlagsUnchanged, systemd's flag tests).
//
// The settings that weigh several flags are Validate's (config.go), and
// each door's part is here too (doors.go: the data port's TLS, NATS, the
// Redis door's sockets and users, the console's token), so that a daemon
// refuses a bad configuration before it opens anything. Test hooks are
// not settings: they live in internal/daemonhooks (WithHooks).
package config
