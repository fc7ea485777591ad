#!/bin/bash
# selftest.sh [-v] [CACHE_DIR]
#
# Self-test / demo of the VM test infrastructure:
#   - creates network namespace PREFIX-PID (PREFIX is $NVME_DDP_NETNS_PREFIX,
#     or nvmeddp-vm; tests/vm/netns.sh) with bridge br0 (198.18.0.1/24) and
#     TAP tap0 enslaved to it (all torn down again on exit)
#   - builds (or reuses) the cached guest (build-guest.sh)
#   - boots it with run-guest.sh at 198.18.0.10/24 running guest/selftest-guest.sh,
#     which exports a RAM-backed null_blk through the kernel NVMe/TCP target on
#     198.18.0.10:4420 and exercises nvme discover/connect/list and fio inside
#     the guest
#   - from the host side, inside the namespace, connects to 198.18.0.10:4420,
#     sends an NVMe/TCP ICReq and checks the ICResp, then tells the guest it is
#     done (TCP connect to 198.18.0.10:7777)
#
# Quiet on success (one summary line); -v also prints the guest's output.
# Exit status: 0 pass, 1 fail, 77 skipped (not root, no qemu, ...).
set -euo pipefail

HERE=$(dirname "$(readlink -f "$0")")
VERBOSE=0
if [[ ${1:-} == -v ]]; then VERBOSE=1; shift; fi
CACHE_DIR=${1:-${NVME_DDP_VM_CACHE:-/var/cache/nvme-ddp-vm}}

. "$HERE/netns.sh"
netns_name nvmeddp-vm
HOST_IP=198.18.0.1/24
GUEST_IP=198.18.0.10/24
GUEST_ADDR=${GUEST_IP%/*}
NVME_PORT=4420
SIGNAL_PORT=7777
TIMEOUT=${SELFTEST_TIMEOUT:-300}

skip() { echo "selftest: skipping: $*" >&2; exit 77; }
fail() { echo "selftest: FAIL: $*" >&2; exit 1; }

((EUID == 0)) || skip "not root"
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not installed"
command -v ip >/dev/null || skip "ip (iproute2) not installed"
[[ -c /dev/net/tun ]] || skip "/dev/net/tun missing"

netns_sweep

start=$SECONDS
TMP=$(mktemp -d /tmp/nvme-ddp-selftest.XXXXXX)
GUEST_PID=
cleanup() {
	local rc=$?
	if [[ -n $GUEST_PID ]] && kill -0 "$GUEST_PID" 2>/dev/null; then
		kill "$GUEST_PID" 2>/dev/null || true # run-guest.sh kills its qemu
		wait "$GUEST_PID" 2>/dev/null || true
	fi
	ip netns del "$NS" 2>/dev/null || true
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build first (may take a while once), so it does not eat the guest timeout
rc=0
"$HERE/build-guest.sh" "$CACHE_DIR" || rc=$?
((rc == 0)) || { ((rc == 77)) && exit 77; fail "build-guest.sh failed ($rc)"; }

# --- namespace, bridge, tap ---------------------------------------------------
ip netns add "$NS" || skip "cannot create network namespace"
ip -n "$NS" link set lo up
ip -n "$NS" link add br0 type bridge
ip -n "$NS" addr add "$HOST_IP" dev br0
ip -n "$NS" link set br0 up
ip -n "$NS" tuntap add dev tap0 mode tap
ip -n "$NS" link set tap0 master br0
ip -n "$NS" link set tap0 up

# --- boot the guest in the background ------------------------------------------
"$HERE/run-guest.sh" --cache "$CACHE_DIR" --netns "$NS" --tap tap0 --ip "$GUEST_IP" \
	--script "$HERE/guest/selftest-guest.sh" --timeout "$TIMEOUT" \
	--env "SIGNAL_PORT=$SIGNAL_PORT" --env "PORT=$NVME_PORT" \
	--log "$TMP/console.log" >"$TMP/guest.out" 2>"$TMP/guest.err" &
GUEST_PID=$!
boot_start=$SECONDS

guest_alive() { kill -0 "$GUEST_PID" 2>/dev/null; }
in_ns() { ip netns exec "$NS" "$@"; }

# --- host side: probe the kernel target from the namespace ---------------------
# NVMe/TCP ICReq (128 bytes): pdu-type 0, flags 0, hlen 0x80, pdo 0, plen 128 (LE),
# pfv 0, hpda 0, digests off, maxr2t 0, reserved. Expect an ICResp: 01 00 80 00 80 00 00 00.
probe() {
	in_ns timeout 10 bash -c '
		exec 3<>"/dev/tcp/$0/$1" || exit 1
		{ printf "\x00\x00\x80\x00\x80\x00\x00\x00"; head -c 120 /dev/zero; } >&3
		head -c 128 <&3 | od -An -tx1 -N8 | tr -s " " | sed "s/^ //"
	' "$GUEST_ADDR" "$NVME_PORT" 2>/dev/null
}

ready_at=
while guest_alive && ((SECONDS - boot_start < TIMEOUT)); do
	if grep -aq GUEST-TARGET-READY "$TMP/console.log" 2>/dev/null; then
		ready_at=$((SECONDS - boot_start))
		break
	fi
	sleep 0.5
done
[[ -n $ready_at ]] || {
	wait "$GUEST_PID" || true
	cat "$TMP/guest.out" "$TMP/guest.err" >&2
	fail "guest never reported the target ready"
}

icresp=
for _ in $(seq 20); do
	guest_alive || break
	icresp=$(probe) && [[ -n $icresp ]] && break
	sleep 0.5
done
probe_ok=0
[[ $icresp == "01 00 80 00 80 00 00 00" ]] && probe_ok=1

# Tell the guest we are done (retry: it listens only after its own tests).
signal_ok=0
msg="host-probe icresp=[$icresp]"
while guest_alive; do
	if in_ns timeout 5 bash -c 'echo "$2" >"/dev/tcp/$0/$1"' "$GUEST_ADDR" "$SIGNAL_PORT" "$msg" 2>/dev/null; then
		signal_ok=1
		break
	fi
	sleep 1
done

guest_rc=0
wait "$GUEST_PID" || guest_rc=$?
GUEST_PID=

if ((VERBOSE)) || ((guest_rc != 0 || probe_ok == 0)); then
	cat "$TMP/guest.out"
	cat "$TMP/guest.err" >&2
fi
((probe_ok)) || fail "host could not talk NVMe/TCP to $GUEST_ADDR:$NVME_PORT (got '$icresp')"
((signal_ok)) || fail "could not signal the guest on port $SIGNAL_PORT"
((guest_rc == 0)) || fail "guest script failed ($guest_rc)"
boot=$(grep -a -o 'GUEST-SCRIPT-BEGIN uptime=[0-9.]*' "$TMP/console.log" | cut -d= -f2)
echo "selftest: OK (guest kernel $(cat "$CACHE_DIR/kernel-release"), init after ${boot}s guest uptime," \
	"target ready after ${ready_at}s, total $((SECONDS - start))s)"
