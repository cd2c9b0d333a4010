# %post of ctxmemd (RPM; $1 = 1 on install, 2 on upgrade): reload units,
# enable ctxmemd.service on first install; the scheduler unit is not
# enabled (not yet functional).
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || :
fi
if [ "$1" -eq 1 ]; then
	systemctl --no-reload enable ctxmemd.service >/dev/null 2>&1 || :
fi
