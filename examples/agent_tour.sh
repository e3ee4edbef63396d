#!/usr/bin/env bash
# examples/agent_tour.sh -- README.md's "Running it on every host", run for
# real: two copies of examples/asyncio_server.py in a cgroup of their own (as
# a systemd unit's processes are), `loopscope agent` watching that cgroup,
# traffic with blocking requests, a scrape of /metrics, Debian's Prometheus
# scraping the agent and answering "which loops lag", the traces the
# triggers wrote.  Each command is printed as `$ COMMAND` with its output;
# examples/agent_tour.out is the run README's blocks come from.  Needs root
# (BPF, cgroups), build/ (tests/run.sh builds it), curl and prometheus.
#
#   examples/agent_tour.sh > examples/agent_tour.out
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d /tmp/loopscope-agent-tour.XXXXXX)
cg2=$(awk '$0 ~ / - cgroup2 / { print $5; exit }' /proc/self/mountinfo)
cg="$cg2/tour-api.service"
pids=() agent= prom=
cleanup() {
  for p in $agent $prom "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; done
  rmdir "$cg" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
show() { # shown [run]
  printf '$ %s\n' "$1"
  bash -c "${2:-$1}" 2>&1 || true
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The service: two processes in one cgroup.
mkdir -p "$cg"
ports=()
for i in 1 2; do
  python3 "$root/examples/asyncio_server.py" > "srv$i.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q '^port' "srv$i.log" 2>/dev/null && break; sleep 0.05; done
  ports+=("$(awk '/^port/ { print $2 }' "srv$i.log")")
  echo "${pids[-1]}" > "$cg/cgroup.procs"
done
mport=$(free_port)
cat > agent.conf <<EOF
cgroup tour-api.service
dir $work/traces
max-total 64M
trigger blocking>=40ms
tail 500ms
metrics 127.0.0.1:$mport
EOF
printf '$ cat /etc/loopscope/agent.conf\n'
sed "s|$work/traces|/var/lib/loopscope|; s|127.0.0.1:$mport|127.0.0.1:9464|" agent.conf
printf '$ loopscope agent -c /etc/loopscope/agent.conf &\n'
"$root/build/viewer/loopscope" agent -c agent.conf > agent.log 2>&1 &
agent=$!
for _ in $(seq 200); do [ "$(grep -c ': recording' agent.log)" -ge 2 ] && break; sleep 0.05; done
sed "s|$work/traces|/var/lib/loopscope|; s|127.0.0.1:$mport|127.0.0.1:9464|" agent.log

# Prometheus scrapes the agent every second.
pport=$(free_port)
cat > prom.yml <<EOF
global: { scrape_interval: 1s, scrape_timeout: 1s }
scrape_configs:
  - job_name: loopscope
    static_configs: [ { targets: ['127.0.0.1:$mport'] } ]
EOF
prometheus --config.file=prom.yml --storage.tsdb.path="$work/prom" \
  --web.listen-address="127.0.0.1:$pport" > prom.log 2>&1 &
prom=$!
for _ in $(seq 200); do curl -sf "127.0.0.1:$pport/-/ready" > /dev/null && break; sleep 0.1; done
# until it has scraped the agent a few times
for _ in $(seq 100); do
  n=$(curl -s "127.0.0.1:$pport/api/v1/query" --data-urlencode 'query=count_over_time(up{job="loopscope"}[1m])' |
      python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')
  [ "${n%.*}" -ge 3 ] && break
  sleep 0.2
done

# Traffic: the first process gets the blocking route three times.
echo
printf '$ for i in $(seq 20); do curl -s localhost:%s/ localhost:%s/; done; for i in 1 2 3; do curl -s localhost:%s/report; sleep 1; done\n' \
  "${ports[0]}" "${ports[1]}" "${ports[0]}"
for _ in $(seq 20); do curl -s -o /dev/null "localhost:${ports[0]}/"; curl -s -o /dev/null "localhost:${ports[1]}/"; done
for _ in 1 2 3; do curl -s -o /dev/null "localhost:${ports[0]}/report"; sleep 1; done
sleep 3                                   # scraped since
echo
show "curl -s localhost:9464/metrics | grep -E '^loopscope_(blocking_episodes_total|blocking_site_episodes_total)' | grep -v ' 0\$'" \
     "curl -s 127.0.0.1:$mport/metrics | grep -E '^loopscope_(blocking_episodes_total|blocking_site_episodes_total)' | grep -v ' 0\$'"
echo
q='histogram_quantile(0.99, sum by (pid, loop, le) (rate(loopscope_loop_iteration_seconds_bucket[1m])))'
show "curl -s localhost:9090/api/v1/query --data-urlencode 'query=$q' | jq -r '.data.result[] | \"\\(.metric.pid) \\(.metric.loop) \\(.value[1])\"'" \
     "curl -s 127.0.0.1:$pport/api/v1/query --data-urlencode 'query=$q' | python3 -c 'import json,sys; [print(r[\"metric\"][\"pid\"], r[\"metric\"][\"loop\"], r[\"value\"][1]) for r in json.load(sys.stdin)[\"data\"][\"result\"]]'"
echo
show 'ls /var/lib/loopscope' "ls $work/traces"
first=$(ls "$work/traces" | head -1)
show "loopscope blocking /var/lib/loopscope/$first --limit 1 | head -4" \
     "$root/build/viewer/loopscope blocking $work/traces/$first --limit 1 | head -4"
