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
LIMIT=${BATCH_LIMIT_S:-560}
start=$(date +%s)
for area in "$@"; do
  mkdir -p "/tmp/o/$area"
  t0=$(date +%s)
  left=$(( LIMIT - (t0 - start) - 10 ))
  if [ "$left" -lt 20 ]; then echo "=== $area not started: batch deadline"; continue; fi
  ( export OUT="/tmp/o/$area" AREA_LEFT="$left"; timeout -k 5 "$left" bash -c "$(cat "$REQ/$area.txt")" > "/tmp/o/$area/_stdout.txt" 2>&1; echo "rc=$? (124: stopped at the batch deadline)" >> "/tmp/o/$area/_stdout.txt" )
  echo "=== $area ($(( $(date +%s) - t0 )) s)"; tail -12 "/tmp/o/$area/_stdout.txt"
  ( cd /tmp/o && tar czf "$R/$area.tgz" "$area" )
done
