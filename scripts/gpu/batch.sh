#!/usr/bin/env bash
# Run several areas' GPU validation commands in one device call.
#   [BATCH_LIMIT_S=560] bash scripts/gpu/batch.sh REQDIR area1 area2 ...
# REQDIR/<area>.txt holds one shell command line for that area. Each runs with its own OUT
# (/tmp/o/<area>), its console in _stdout.txt, and comes back as $OUT/<area>.tgz.
set -u
REQ=$1; shift
R=${OUT:?OUT must be set}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python
# Every area stops by the batch's deadline (BATCH_LIMIT_S seconds from the start, default 560:
# under the device tool's 600 s command limit, which can be shorter when the machine's held time
# runs out; pass the `limit_s` you expect) so what it wrote so far still comes back as its .tgz.
# Each area sees AREA_LEFT: the seconds it has before the batch stops it.
# Set BATCH_LIMIT_S below the call's real limit: when the session's device time is nearly spent the
# tool's limit_s is budget_left_s less the machine's start, not 600 (session 19 lost a whole call to
# BATCH_LIMIT_S=585 under a 556 s limit).
LIMIT=${BATCH_LIMIT_S:-560}
# snapshot AREA: tar /tmp/o/AREA into $R/AREA.tgz through a temporary file (a kill mid-tar leaves
# the previous snapshot whole).
snapshot() {
  local tmp="$R/.$1.tgz.$BASHPID.tmp" rc
  ( cd /tmp/o && tar czf "$tmp" "$1" 2>/dev/null ); rc=$?
  # GNU tar exits 1 when a file changed while it was read: the archive is still whole
  if [ "$rc" -le 1 ]; then mv -f "$tmp" "$R/$1.tgz"; else rm -f "$tmp"; fi
}
# snapshot_loop AREA: a snapshot every SNAPSHOT_S seconds until TERM, which it takes only between
# snapshots (bash runs the trap after the tar in flight), killing its sleep so no process of it
# outlives it; its output goes to /dev/null so it holds no pipe of the caller's.
snapshot_loop() {
  local pid=""
  trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; exit 0' TERM
  while :; do
    sleep "${SNAPSHOT_S:-60}" & pid=$!
    wait "$pid"
    pid=""
    snapshot "$1"
  done
}
start=$(date +%s)
for area in "$@"; do
  mkdir -p "/tmp/o/$area"
  t0=$(date +%s)
  left=$(( LIMIT - (t0 - start) - 10 ))
  if [ "$left" -lt 20 ]; then echo "=== $area not started: batch deadline"; continue; fi
  # While the area runs, a snapshot of its folder replaces $R/<area>.tgz every SNAPSHOT_S seconds
  # (default 60), so a call killed before the batch's own deadline (the device tool's limit_s was
  # shorter than BATCH_LIMIT_S) still returns the area's state as of its last snapshot.
  snapshot_loop "$area" > /dev/null 2>&1 &
  snap=$!
  ( export OUT="/tmp/o/$area" AREA_LEFT="$left"; timeout -k 5 "$left" bash -c "$(cat "$REQ/$area.txt")" > "/tmp/o/$area/_stdout.txt" 2>&1; echo "rc=$? (124: stopped at the batch deadline)" >> "/tmp/o/$area/_stdout.txt" )
  kill "$snap" 2>/dev/null; wait "$snap" 2>/dev/null   # waits for a snapshot in flight
  echo "=== $area ($(( $(date +%s) - t0 )) s)"; tail -12 "/tmp/o/$area/_stdout.txt"
  snapshot "$area"
done
