# %postun of ctxmemd (RPM; $1 = 0 on erase, 1 on upgrade): reload units;
# on upgrade restart the daemon if it was running. RPM has no purge: state
# in /var/lib/ctxmem stays after erase (remove it by hand).
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || :
	if [ "$1" -ge 1 ]; then
		systemctl try-restart ctxmemd.service >/dev/null 2>&1 || :
	fi
fi
