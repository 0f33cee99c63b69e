// Package systemd holds no code: it is the directory of the files that run
// cachecastd under systemd, and of the test that checks them.
//
//   - cachecastd.service: the unit. Type=notify (READY=1 after recovery,
//     WATCHDOG=1 while the store is healthy), runs as the user cachecast
//     with StateDirectory=cachecast (/var/lib/cachecast, the data) and
//     RuntimeDirectory=cachecast (/run/cachecast/cachecast.sock, the
//     socket), reloads on SIGHUP, and is hardened (systemd-analyze
//     security rates it "OK").
//   - cachecast.sysusers: the user and group cachecast (sysusers.d(5)).
//     Users of the local API join the group to reach the socket.
//   - cachecast.tmpfiles: the state directory and an empty
//     /etc/default/cachecastd (tmpfiles.d(5)).
//   - cachecastd.env.example: every CACHECAST_<FLAG> with its default,
//     commented out; installed as /etc/default/cachecastd when there is
//     none.
//   - run-cachecast.mount and cachecastd-huge-view.conf (optional): a
//     tmpfs of huge pages (huge=within_size) mounted on /run/cachecast,
//     and the drop-in that makes the service wait for it, so that the
//     shared view's readers map it with 2 MiB pages (fewer TLB misses a
//     random read; docs/shared-view.md and BENCHMARKS.md give the figures).
//
// Install (what `make install` does, DESTDIR-aware; the unit's ExecStart
// follows PREFIX, /usr/local by default):
//
//	install -D -m 0755 bin/cachecastd /usr/local/bin/cachecastd
//	install -D -m 0755 bin/cachecast /usr/local/bin/cachecast
//	install -D -m 0644 systemd/cachecastd.service /usr/local/lib/systemd/system/cachecastd.service
//	install -D -m 0644 systemd/cachecast.sysusers /usr/local/lib/sysusers.d/cachecast.conf
//	install -D -m 0644 systemd/cachecast.tmpfiles /usr/local/lib/tmpfiles.d/cachecast.conf
//	install -D -m 0644 systemd/cachecastd.env.example /usr/local/share/doc/cachecast/cachecastd.env.example
//	install -D -m 0640 systemd/cachecastd.env.example /etc/default/cachecastd   # only if absent
//
// then, on the machine, as root:
//
//	systemd-sysusers cachecast.conf
//	systemd-tmpfiles --create cachecast.conf
//	systemctl daemon-reload && systemctl enable --now cachecastd
//
// For the shared view on huge pages, also:
//
//	install -D -m 0644 systemd/run-cachecast.mount /usr/local/lib/systemd/system/run-cachecast.mount
//	install -D -m 0644 systemd/cachecastd-huge-view.conf /etc/systemd/system/cachecastd.service.d/huge-view.conf
//	systemctl daemon-reload && systemctl restart cachecastd
//	grep -E 'ShmemHugePages|ShmemPmdMapped' /proc/meminfo   # non-zero once the view is mapped
//
// The tests run systemd-analyze verify and systemd-analyze security on the
// unit (verify on the mount unit and the drop-in too), apply the sysusers and tmpfiles snippets to a scratch root, check
// that the unit, the snippets and the example agree on paths and names,
// and check the example against the daemon's real flags and defaults. They need the systemd package (apt-get install systemd); they fail,
// saying so, when it is missing.
package systemd
