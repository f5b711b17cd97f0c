#!/usr/bin/env bash
# Which WAN emulation this machine offers (docs/wan-emulation.md).
#
#   scripts/netem_check.sh              # probe, print one line per mechanism and the mode
#   scripts/netem_check.sh tbf-up RATE  # optional kernel rate limit: namespaces atoll-a and
#                                       # atoll-b joined by a veth pair (10.77.0.1 <-> 10.77.0.2)
#                                       # with `tc tbf` at RATE Mbit/s on both ends
#   scripts/netem_check.sh tbf-down     # remove them
#
# Probes run in a throw-away network namespace, so the host's interfaces are never touched:
#   - netns + veth:   `ip netns add`, `ip link add ... type veth` (needs root / CAP_NET_ADMIN);
#   - tc tbf:         a token-bucket rate limit on the veth (sch_tbf);
#   - tc netem:       delay / loss / reordering in the kernel (sch_netem).
# The last line is the mode atoll's WAN tests and `atoll launch --emulate-wan` rely on:
# "relay" (user space, always available) unless netem works. The relay is what atoll uses
# either way; netem and tbf are reported so that a user can add kernel shaping on top.
# Exit code 0 in every case (this is a report, not a requirement).
set -uo pipefail

probe_ns="atoll-probe-$$"

cleanup_probe() { ip netns del "$probe_ns" 2>/dev/null || true; }

probe() {
  if [ "$(id -u)" != 0 ]; then
    echo "netns+veth: unavailable (needs root or CAP_NET_ADMIN)"
    echo "tc tbf: not probed (needs a namespace)"
    echo "tc netem: not probed (needs a namespace)"
    echo "mode: relay (netem not available)"
    return
  fi
  trap cleanup_probe EXIT
  local ns_ok=0 tbf_ok=0 netem_ok=0 why
  if why=$(ip netns add "$probe_ns" 2>&1) &&
     why=$(ip -n "$probe_ns" link add atp0 type veth peer name atp1 2>&1) &&
     why=$(ip -n "$probe_ns" link set atp0 up 2>&1); then
    ns_ok=1
    echo "netns+veth: available"
  else
    echo "netns+veth: unavailable (${why//$'\n'/ })"
  fi
  if [ "$ns_ok" = 1 ]; then
    if why=$(ip netns exec "$probe_ns" tc qdisc add dev atp0 root tbf rate 20mbit burst 32kbit latency 50ms 2>&1); then
      tbf_ok=1
      echo "tc tbf: available"
      ip netns exec "$probe_ns" tc qdisc del dev atp0 root 2>/dev/null
    else
      echo "tc tbf: unavailable (${why//$'\n'/ })"
    fi
    if why=$(ip netns exec "$probe_ns" tc qdisc add dev atp0 root netem delay 10ms loss 0.1% 2>&1); then
      netem_ok=1
      echo "tc netem: available"
    else
      echo "tc netem: unavailable (${why//$'\n'/ }; the kernel has no sch_netem)"
    fi
  else
    echo "tc tbf: not probed (no namespace)"
    echo "tc netem: not probed (no namespace)"
  fi
  if [ "$netem_ok" = 1 ]; then
    echo "mode: netem available (atoll still uses its relay; netem may be added on top)"
  elif [ "$tbf_ok" = 1 ]; then
    echo "mode: relay (netem not available; optional kernel rate limit: $0 tbf-up RATE)"
  else
    echo "mode: relay (netem not available)"
  fi
}

tbf_up() {
  local rate="${1:?usage: $0 tbf-up RATE_MBIT}"
  set -e
  ip netns add atoll-a
  ip netns add atoll-b
  ip link add atoll-va netns atoll-a type veth peer name atoll-vb netns atoll-b
  ip -n atoll-a addr add 10.77.0.1/24 dev atoll-va
  ip -n atoll-b addr add 10.77.0.2/24 dev atoll-vb
  for side in a b; do
    ip -n "atoll-$side" link set lo up
    ip -n "atoll-$side" link set "atoll-v$side" up
    ip netns exec "atoll-$side" tc qdisc add dev "atoll-v$side" root tbf rate "${rate}mbit" burst 32kbit latency 100ms
  done
  echo "atoll-a (10.77.0.1) <-> atoll-b (10.77.0.2), tbf ${rate} Mbit/s each way."
  echo "Run a process in one: ip netns exec atoll-a build/atoll island CONFIG --id 0 (transport.host: 10.77.0.1)"
}

tbf_down() {
  ip netns del atoll-a 2>/dev/null || true
  ip netns del atoll-b 2>/dev/null || true
  echo "removed atoll-a and atoll-b"
}

case "${1:-probe}" in
  probe) probe ;;
  tbf-up) shift; tbf_up "$@" ;;
  tbf-down) tbf_down ;;
  *) echo "usage: $0 [probe | tbf-up RATE_MBIT | tbf-down]" >&2; exit 2 ;;
esac
