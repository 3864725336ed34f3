#!/bin/sh
# Two "hosts" on one machine: two network namespaces joined by a veth pair, each with its own host
# name (a UTS namespace), and one OpenMPI job across them over TCP. mpirun runs in the first
# namespace; it starts its daemon (orted) in the second through a plm_rsh_agent that does
# `ip netns exec` where a cluster would use ssh. Tessera counts two hosts, so the mesh has two
# slices and dcn_data_parallelism=2 puts the data-parallel all-reduce on the veth link.
#
# Usage: netns_two_hosts.sh TESSERA_BINARY CONFIG OUT_DIR [key=value ...]
#   trains with the overrides on the two hosts, one rank each, and leaves OUT_DIR/output.txt.
# Exit status: that of mpirun; 77 when this machine cannot do it (not root, no `ip netns`, no
# unshare, no mpirun), with the reason on stderr, so that the caller reports a skip.
set -u

if [ $# -lt 3 ]; then
  echo "usage: $0 TESSERA_BINARY CONFIG OUT_DIR [key=value ...]" >&2
  exit 2
fi
BIN=$1
CONFIG=$2
OUT=$3
shift 3

skip() {
  echo "netns_two_hosts: cannot run here: $*" >&2
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (ip netns add, veth links)"
command -v ip > /dev/null || skip "no ip command (Debian: iproute2)"
command -v unshare > /dev/null || skip "no unshare (Debian: util-linux)"
command -v mpirun > /dev/null || skip "no mpirun (Debian: openmpi-bin)"

TAG=tessera$$
NS_A=${TAG}a
NS_B=${TAG}b
NET=10.213.$(($$ % 200 + 20))
ADDR_A=$NET.1
ADDR_B=$NET.2
mkdir -p "$OUT"

cleanup() {
  ip netns del "$NS_A" 2> /dev/null
  ip netns del "$NS_B" 2> /dev/null
  rm -f "$OUT/rsh_agent.sh" "$OUT/hostfile"
}
trap cleanup EXIT INT TERM

ip netns add "$NS_A" 2> "$OUT/netns.err" || skip "ip netns add failed: $(cat "$OUT/netns.err")"
ip netns add "$NS_B" || skip "ip netns add failed"
ip link add "${TAG}va" type veth peer name "${TAG}vb" || skip "cannot create a veth pair"
ip link set "${TAG}va" netns "$NS_A"
ip link set "${TAG}vb" netns "$NS_B"
ip -n "$NS_A" addr add "$ADDR_A/24" dev "${TAG}va"
ip -n "$NS_B" addr add "$ADDR_B/24" dev "${TAG}vb"
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "${TAG}va" up
ip -n "$NS_B" link set "${TAG}vb" up

# The daemon for the second host runs in its namespace under its own host name; mpirun passes the
# host (ignored: there is only one other) and the command to run there.
cat > "$OUT/rsh_agent.sh" << EOF
#!/bin/sh
shift
exec ip netns exec $NS_B unshare --uts /bin/sh -c 'hostname tessera-host-b && exec /bin/sh -c "\$*"' agent "\$@"
EOF
chmod +x "$OUT/rsh_agent.sh"
printf '%s slots=1\n%s slots=1\n' "$ADDR_A" "$ADDR_B" > "$OUT/hostfile"

ROOT_FLAG=
[ "$(id -u)" = 0 ] && ROOT_FLAG=--allow-run-as-root
# Arguments are passed through "$@" untouched (the overrides may hold spaces).
ip netns exec "$NS_A" unshare --uts /bin/sh -c 'hostname tessera-host-a && exec "$@"' sh \
  mpirun $ROOT_FLAG -np 2 --hostfile "$OUT/hostfile" --map-by node --bind-to none \
  --mca plm_rsh_agent "$OUT/rsh_agent.sh" --mca plm_rsh_no_tree_spawn 1 \
  --mca btl self,tcp --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
  -x OMP_NUM_THREADS=1 \
  "$BIN" train "$CONFIG" "$@" > "$OUT/output.txt" 2>&1
status=$?
cat "$OUT/output.txt"
exit $status
