#!/usr/bin/env bash
# Run `convdoctor bench cnn-layers` shard by shard on the GPU, stopping before a deadline, so a
# long suite fits several device calls and a killed call loses at most one shard.
#   bash scripts/gpu/tune_suite.sh CONFIG DIRECTION N "K1 K2 ..." DEADLINE_S [extra bench args]
# Writes $OUT/bench_<config>_<direction>_<K>of<N>.json (+ .txt, .stderr); join them later with
#   convdoctor bench --merge <files...>
set -u
CONFIG=$1; DIR=$2; N=$3; SHARDS=$4; DEADLINE=$5; shift 5
export PYTHONPATH=src:/tmp/site:${PYTHONPATH:-}
t0=$(date +%s)
for K in $SHARDS; do
  el=$(( $(date +%s) - t0 ))
  left=$(( DEADLINE - el ))
  if [ "$left" -lt 60 ]; then echo "deadline: shard $K/$N and later not started"; break; fi
  base="$OUT/bench_${CONFIG}_${DIR}_${K}of${N}"
  # a shard stopped by a deadline leaves $base.json.partial (its finished arms and the finished
  # problems of the arm it stopped in) in $OUT; carry it back in RESUME_DIR and the next call
  # continues it (`convdoctor bench --resume`). A state already in $OUT (a warm machine keeps
  # /tmp/o/<area> between calls) is the latest one the bench wrote: it wins over the copy.
  part="${RESUME_DIR:-/nonexistent}/$(basename "$base").json.partial"
  if [ -f "$base.json.partial" ]; then
    echo "shard $K/$N: resuming from $base.json.partial"
  elif [ -f "$part" ]; then
    cp "$part" "$base.json.partial" && echo "shard $K/$N: resuming from $part"
  fi
  echo "=== $(date -u +%FT%TZ) shard $K/$N" >> "$base.stderr"
  timeout "$left" python3 -m convdoctor bench cnn-layers --config "$CONFIG" --direction "$DIR" \
    --shard "$K/$N" --budget 0.5 --timeout 30 --json --out "$base.json" --resume "$@" \
    > /dev/null 2>> "$base.stderr"   # appended (a header per run) when OUT is kept
  echo "shard $K/$N rc=$? after $(( $(date +%s) - t0 )) s"
  [ -f "$base.json" ] && python3 -c "
import json,sys; s=json.load(open('$base.json'))['summary']
print({k: (round(v,3) if isinstance(v,float) else v) for k,v in s.items()})"
done
