#!/usr/bin/env bash
# A test cluster on one machine: N network namespaces as "hosts", each with its own address on a
# private subnet, joined through a switch namespace, so `mpirun` ranks talk TCP over veth links
# (never shared memory or loopback) whose bandwidth, latency and loss can be set.
#
#   scripts/netns-cluster.sh check                 exit 0 if this machine can make one, else 77 + why
#   scripts/netns-cluster.sh up N [--name P] [--rate MBIT] [--delay MS] [--loss PCT]
#       makes hosts P-h1..P-hN (10.77.0.1..N/24 on eth0), a switch namespace P-sw, and in
#       /run/peregrine-netns/P/: hostfile, agent (Open MPI's rsh agent), mpirun (a launcher that
#       runs mpirun on host 1 with every flag it needs). Prints that directory. P defaults to
#       pg<pid>; names are unique per run so parallel test runs do not collide.
#       --rate MBIT   token bucket (tbf) on every host's egress: the link's bandwidth
#       --delay MS    one-way latency of every host's link (a frame waits MS in the switch)
#       --loss PCT    the switch drops that share of frames at random
#   scripts/netns-cluster.sh link P I up|down      takes host I's link down or brings it back
#   scripts/netns-cluster.sh down P                kills what runs in the hosts, removes everything
#
# The kernels here have tbf but no netem (see docs/design/partial-models-and-several-processes.md),
# so latency and loss come from a small switch in user space (tests/dist/netns_switch.cpp, built as
# build/tests/dist/netns_switch; PEREGRINE_NETNS_SWITCH names another). Without --delay/--loss a
# kernel bridge switches instead. Everything stays inside the namespaces: the machine's own
# interfaces and addresses are never touched.
#
# Launching: `/run/peregrine-netns/P/mpirun -np K prog args` runs K ranks on hosts 1..K (one per
# host, rank 0 on host 1; mpirun itself runs in host 1's namespace so every orted reaches it), with
# --mca btl tcp,self and the TCP interfaces limited to the cluster's subnet. A client of a server on
# rank 0 reaches it with `ip netns exec P-h1 ...` (or setns into /run/netns/P-h1).
set -euo pipefail

state_root=/run/peregrine-netns
subnet=10.77.0

die() { echo "netns-cluster: $*" >&2; exit 1; }

check() {
  [[ $(id -u) -eq 0 ]] || { echo "netns-cluster: needs root (network namespaces, veth, tc)" >&2; return 77; }
  for tool in ip tc; do
    command -v "$tool" >/dev/null || { echo "netns-cluster: '$tool' is missing (iproute2; scripts/setup.sh installs it)" >&2; return 77; }
  done
  local probe="pgprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "netns-cluster: cannot create network namespaces here (ip netns add failed: no CAP_SYS_ADMIN or no netns support)" >&2
    return 77
  fi
  local ok=0
  ip -n "$probe" link add name pa type veth peer name pb 2>/dev/null || ok=1
  ip netns del "$probe"
  ((ok == 0)) || { echo "netns-cluster: the kernel has no veth support" >&2; return 77; }
}

switch_binary() {
  if [[ -n ${PEREGRINE_NETNS_SWITCH:-} ]]; then echo "$PEREGRINE_NETNS_SWITCH"; return; fi
  local here; here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  for b in "$here/build/tests/dist/netns_switch"; do [[ -x $b ]] && { echo "$b"; return; }; done
  die "--delay/--loss need the user-space switch: build it (cmake --build build --target netns_switch) or set PEREGRINE_NETNS_SWITCH"
}

down() {
  local p=$1
  [[ $p =~ ^[A-Za-z0-9_-]+$ ]] || die "bad cluster name '$p'"
  # Processes started inside the hosts (ranks, orteds, the switch) go first, by pid.
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$p-(h[0-9]+|sw)$" || true); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  done
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$p-(h[0-9]+|sw)$" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "${state_root:?}/$p"
}

up() {
  local n=$1; shift
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 200)) || die "up: N must be 1..200"
  local p="pg$$" rate="" delay=0 loss=0
  while (($#)); do
    case $1 in
      --name) p=$2; shift 2 ;;
      --rate) rate=$2; shift 2 ;;
      --delay) delay=$2; shift 2 ;;
      --loss) loss=$2; shift 2 ;;
      *) die "up: unknown option '$1'" ;;
    esac
  done
  [[ $p =~ ^[A-Za-z0-9_-]{1,10}$ ]] || die "--name: 1-10 letters, digits, - or _"
  check || exit $?
  # Whatever fails from here on, nothing is left behind.
  trap 'down "$p"' ERR INT TERM
  local dir=$state_root/$p
  mkdir -p "$dir"
  local sw=$p-sw
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  local userspace=0
  [[ $delay != 0 || $loss != 0 ]] && userspace=1
  if ((userspace == 0)); then
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
  fi
  : >"$dir/hostfile"
  local ports=()
  for ((i = 1; i <= n; i++)); do
    local h=$p-h$i
    ip netns add "$h"
    ip -n "$h" link set lo up
    ip link add "v$p$i" netns "$h" type veth peer name "p$i" netns "$sw"
    ip -n "$h" link set "v$p$i" name eth0
    ip -n "$h" addr add "$subnet.$i/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$sw" link set "p$i" up
    if ((userspace == 0)); then ip -n "$sw" link set "p$i" master br0; fi
    ports+=("p$i")
    if [[ -n $rate ]]; then
      # burst: at least one full GSO frame plus 1 ms at the rate, so the bucket can pass it.
      local burst=$((rate * 1000 / 8 > 131072 ? rate * 1000 / 8 : 131072))
      tc -n "$h" qdisc add dev eth0 root tbf rate "${rate}mbit" burst "$burst" latency 100ms
    fi
    echo "$h slots=1" >>"$dir/hostfile"
  done
  if ((userspace == 1)); then
    local bin; bin=$(switch_binary)
    ip netns exec "$sw" "$bin" --delay-ms "$delay" --loss "$loss" "${ports[@]}" >"$dir/switch.log" 2>&1 &
    echo $! >"$dir/switch.pid"
    sleep 0.2
    kill -0 "$(cat "$dir/switch.pid")" 2>/dev/null || { cat "$dir/switch.log" >&2; die "the switch did not start"; }
  fi
  # Open MPI's rsh agent gets the host (a namespace name) and one string with the command. Each
  # host also gets a host name of its own (a UTS namespace) and its own temporary folder, as real
  # hosts have: Open MPI's session folders are named after the host and would collide in one /tmp.
  cat >"$dir/agent" <<EOF
#!/bin/sh
host=\$1
shift
mkdir -p $dir/tmp/\$host
exec ip netns exec "\$host" unshare --uts env TMPDIR=$dir/tmp/\$host sh -c "hostname \$host; \$*"
EOF
  cat >"$dir/mpirun" <<EOF
#!/bin/sh
# mpirun on this cluster: ranks one per host (rank 0 on $p-h1), TCP only, on the cluster's subnet.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec ip netns exec $p-h1 mpirun --hostfile $dir/hostfile --mca plm_rsh_agent $dir/agent \\
  --mca btl tcp,self --mca btl_tcp_if_include $subnet.0/24 --mca oob_tcp_if_include $subnet.0/24 \\
  --bind-to none "\$@"
EOF
  chmod +x "$dir/agent" "$dir/mpirun"
  trap - ERR INT TERM
  echo "$dir"
}

link() {
  local p=$1 i=$2 state=$3
  [[ $state == up || $state == down ]] || die "link: up or down"
  ip -n "$p-sw" link set "p$i" "$state"
}

cmd=${1:-}
shift || true
case $cmd in
  check) check ;;
  up) (($# >= 1)) || die "up N [options]"; up "$@" ;;
  down) (($# == 1)) || die "down NAME"; down "$1" ;;
  link) (($# == 3)) || die "link NAME I up|down"; link "$@" ;;
  *) sed -n '2,30p' "$0" >&2; exit 2 ;;
esac
