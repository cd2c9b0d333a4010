# %preun of ctxmemd (RPM; $1 = 0 on erase, 1 on upgrade): on erase stop and
# disable the services (the daemon unmounts and writes back on stop).
if [ "$1" -eq 0 ]; then
	systemctl --no-reload disable --now ctxmemd-scheduler.service ctxmemd.service >/dev/null 2>&1 || :
fi
