# apt_get ARGS...: apt-get ARGS, waiting for a package-manager lock that another process holds (another
# apt-get, dpkg or unattended-upgrades) instead of failing with "E: Could not get lock": one line says so
# and the command is tried again every APT_LOCK_POLL_S seconds. This covers every lock apt takes (dpkg's,
# which DPkg::Lock::Timeout alone would wait for silently, the package lists' and the archives'). At most
# APT_LOCK_TIMEOUT_S seconds in all (default 600), then one line and exit status 1.
# Sourced by fetch-amd-toolchain.sh.
APT_LOCK_TIMEOUT_S="${APT_LOCK_TIMEOUT_S:-600}"
APT_LOCK_POLL_S="${APT_LOCK_POLL_S:-5}"  # between retries

apt_get() {
  local deadline=$((SECONDS + APT_LOCK_TIMEOUT_S)) err rc said="" held
  err="$(mktemp)"
  while :; do
    rc=0
    apt-get "$@" 2>"$err" || rc=$?
    held="$(grep -m1 'Could not get lock' "$err" | sed 's/^E: //')" || true
    if [ "$rc" -eq 0 ] || [ -z "$held" ]; then
      cat "$err" >&2; rm -f "$err"
      return "$rc"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      rm -f "$err"
      echo "error: the package manager is still locked after ${APT_LOCK_TIMEOUT_S} s (${held}): let the other" \
           "apt-get or dpkg finish and run this again, or set APT_LOCK_TIMEOUT_S to wait longer" >&2
      return 1
    fi
    if [ -z "$said" ]; then
      echo "waiting up to ${APT_LOCK_TIMEOUT_S} s for the package manager, which another process holds (${held})" >&2
      said=1
    fi
    sleep "$APT_LOCK_POLL_S"
  done
}
