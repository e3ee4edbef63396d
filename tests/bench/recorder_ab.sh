#!/usr/bin/env bash
# tests/bench/recorder_ab.sh ROUNDS SECONDS BUILD...
#
# Recorders side by side on one server: BUILD[0]/examples/http_server
# under `wrk -t1 -c8 -dSECONDS`, recorded in turn by each BUILD's
# loopscope (attached before each wrk run, detached after it) and
# untraced, ROUNDS times, the order rotated by one each round; prints
# each run's requests/s and, per build, the median and each run's ratio
# to the untraced run of its round.  For changes to the recorder alone: the server, its binary
# and its warm-up are the same for all.  A benchmark: prints numbers.
# Root, wrk; exit status 77 without them.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
rounds=$1 secs=$2
shift 2
builds=()
for b in "$@"; do builds+=("$(realpath "$b")"); done
here=$(cd "$(dirname "$0")" && pwd)
. "$here/http_record.sh"
hr_require recorder_ab wrk
hr_start_server "${builds[0]}"
echo "recorder_ab: ${builds[0]}/examples/http_server under wrk -t1 -c8 -d${secs}s, $rounds rounds"
all=("${builds[@]}" untraced)
for r in $(seq "$rounds"); do
  n=${#all[@]}
  for k in $(seq 0 $((n - 1))); do
    b=${all[$(( (k + r - 1) % n ))]}
    if [ "$b" != untraced ]; then hr_start_recorder "$b"; sleep 1; fi
    rps=$(wrk -t1 -c8 -d"${secs}s" "$url" | awk '/Requests\/sec/ {print $2}')
    if [ "$b" != untraced ]; then hr_stop_recorder >/dev/null; rm -f "$tmp/trace.db"; fi
    echo "$r $b $rps"
  done
done | tee "$tmp/runs"
python3 - "$tmp/runs" <<'PY'
import statistics, sys
runs = [l.split() for l in open(sys.argv[1])]
base = {r: float(v) for r, b, v in runs if b == "untraced"}
order = list(dict.fromkeys(b for _, b, _ in runs))
for b in order:
    v = [float(x) for r, bb, x in runs if bb == b]
    ratios = [float(x) / base[r] for r, bb, x in runs if bb == b]
    print(f"{b}: median {statistics.median(v):.0f} req/s, ratio to its round's untraced run: "
          f"median {statistics.median(ratios):.3f} ({' '.join(f'{x:.2f}' for x in ratios)})")
PY
