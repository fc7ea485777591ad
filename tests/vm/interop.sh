#!/bin/bash
# interop.sh [-v]
#
# Our NVMe/TCP host and controller against the Linux kernel's, in a VM:
#
#   - a network namespace nvmeddp-io-$$ with bridge br0 (198.18.0.1/24) and
#     TAPs tap0 (the guest), tap1 (our smoltcp controller, 198.18.0.2) and
#     tap2 (our smoltcp host, 198.18.0.3); torn down on exit
#   - our controller twice: over kernel TCP on 198.18.0.1:4420 and over
#     smoltcp on tap1 with every offload on, each with a 128 MiB RAM namespace
#   - the guest (guest/interop-guest.sh) runs the Linux host against both,
#     without and with digests: discover, connect, list, id-ctrl, fio verified
#     writes (4 jobs x 16 MiB at QD 32, 4 KiB and 128 KiB), disconnect
#   - then it exports a RAM-backed namespace through nvmet-tcp, and our host
#     on tap2, offloads on and off, identifies it, writes, reads back and
#     verifies
#
# Prints one line per check; -v also prints the guest console and our logs.
# Exit status: 0 pass, 1 fail, 77 skipped (not root, no qemu, ...).
set -euo pipefail

HERE=$(dirname "$(readlink -f "$0")")
ROOT=$(readlink -f "$HERE/../..")
VERBOSE=0
[[ ${1:-} == -v ]] && VERBOSE=1
CACHE_DIR=${NVME_DDP_VM_CACHE:-/var/cache/nvme-ddp-vm}
BIN=${NVME_DDP_BIN:-$ROOT/target/release/nvme-ddp}
TIMEOUT=${INTEROP_TIMEOUT:-1200}

NS=nvmeddp-io-$$
BRIDGE_IP=198.18.0.1
SMOL_CTRL_IP=198.18.0.2
SMOL_HOST_IP=198.18.0.3
GUEST_IP=198.18.0.10
PORT=4420
SIGNAL_PORT=7777
NQN=nqn.2026-11.io.nvme-ddp:interop
TARGET_NQN=nqn.2026-11.org.linux:nvmet-ram

skip() { echo "interop: skipping: $*" >&2; exit 77; }
say() { echo "interop: $*"; }

((EUID == 0)) || skip "not root"
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not installed"
command -v ip >/dev/null || skip "ip (iproute2) not installed"
[[ -c /dev/net/tun ]] || skip "/dev/net/tun missing"

# Namespaces of earlier runs that were killed: remove them once their
# creator is gone and nothing runs in them.
for old in $(ip netns list | awk '$1 ~ /^nvmeddp-io-[0-9]+$/ {print $1}'); do
	kill -0 "${old##*-}" 2>/dev/null && continue
	[[ -z $(ip netns pids "$old" 2>/dev/null) ]] && ip netns del "$old" 2>/dev/null || true
done

start=$SECONDS
TMP=$(mktemp -d /tmp/nvme-ddp-interop.XXXXXX)
PIDS=()
GUEST_PID=
cleanup() {
	local rc=$?
	if [[ -n $GUEST_PID ]]; then kill "$GUEST_PID" 2>/dev/null && wait "$GUEST_PID" 2>/dev/null; fi
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	ip netns del "$NS" 2>/dev/null || true
	if ((rc != 0 && rc != 77)); then
		for f in "$TMP"/*.log; do
			[[ -s $f ]] || continue
			echo "--- $(basename "$f") (last 40 lines) ---"
			tail -n 40 "$f"
		done >&2
	fi
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build -------------------------------------------------------------------
if [[ -z ${NVME_DDP_BIN:-} ]]; then
	(cd "$ROOT" && cargo build --release --quiet) || { say "FAIL: cargo build"; exit 1; }
fi
[[ -x $BIN ]] || { say "FAIL: no binary at $BIN"; exit 1; }
rc=0
"$HERE/build-guest.sh" "$CACHE_DIR" >"$TMP/build-guest.log" 2>&1 || rc=$?
((rc == 0)) || { ((rc == 77)) && skip "cannot build the guest: $(tail -n1 "$TMP/build-guest.log")"; say "FAIL: build-guest.sh ($rc)"; exit 1; }

# --- namespace: bridge and three TAPs -------------------------------------------
ip netns add "$NS" || skip "cannot create a network namespace"
in_ns() { ip netns exec "$NS" "$@"; }
ip -n "$NS" link set lo up
ip -n "$NS" link add br0 type bridge
ip -n "$NS" addr add "$BRIDGE_IP/24" dev br0
ip -n "$NS" link set br0 up
for t in tap0 tap1 tap2; do
	ip -n "$NS" tuntap add dev "$t" mode tap
	ip -n "$NS" link set "$t" master br0
	ip -n "$NS" link set "$t" up
done

# --- our controllers -------------------------------------------------------------
# (ip netns exec execs the program, so $! is the controller itself.)
ip netns exec "$NS" "$BIN" controller --listen "$BRIDGE_IP:$PORT" --ns ram:128M --nqn "$NQN" \
	>"$TMP/ctrl-kernel-tcp.log" 2>&1 &
PIDS+=($!)
ip netns exec "$NS" "$BIN" controller --tap tap1 --ip "$SMOL_CTRL_IP/24" --listen "0.0.0.0:$PORT" \
	--ns ram:128M --nqn "$NQN" --offload all >"$TMP/ctrl-smoltcp.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do
	grep -q listening "$TMP/ctrl-kernel-tcp.log" && grep -q listening "$TMP/ctrl-smoltcp.log" && break
	sleep 0.1
done
grep -q listening "$TMP/ctrl-kernel-tcp.log" || { say "FAIL: kernel-TCP controller did not start"; exit 1; }
grep -q listening "$TMP/ctrl-smoltcp.log" || { say "FAIL: smoltcp controller did not start"; exit 1; }

# --- the guest --------------------------------------------------------------------
"$HERE/run-guest.sh" --cache "$CACHE_DIR" --netns "$NS" --tap tap0 --ip "$GUEST_IP/24" \
	--script "$HERE/guest/interop-guest.sh" --timeout "$TIMEOUT" \
	--env "NQN=$NQN" --env "TARGET_NQN=$TARGET_NQN" --env "PORT=$PORT" \
	--env "SIGNAL_PORT=$SIGNAL_PORT" --env "SIGNAL_TIMEOUT=$TIMEOUT" \
	--env "TARGETS=kernel-tcp=$BRIDGE_IP smoltcp=$SMOL_CTRL_IP" \
	--log "$TMP/guest-console.log" >"$TMP/guest.out" 2>"$TMP/guest.err" &
GUEST_PID=$!

guest_alive() { kill -0 "$GUEST_PID" 2>/dev/null; }

# Part 1 runs in the guest; relay its verdicts as they come.
shown=0
relay() {
	local lines
	[ -e "$TMP/guest-console.log" ] || return 0
	lines=$(tr -d '\r' <"$TMP/guest-console.log" | grep -aE '^(ok  |FAIL)' || true)
	local n
	n=$(printf '%s' "$lines" | grep -c . || true)
	if ((n > shown)); then
		printf '%s\n' "$lines" | tail -n "$((n - shown))" | sed 's/^/guest: /'
		shown=$n
	fi
}
ready=0
while guest_alive && ((SECONDS - start < TIMEOUT)); do
	relay
	if grep -aq GUEST-TARGET-READY "$TMP/guest-console.log" 2>/dev/null; then
		ready=1
		break
	fi
	sleep 1
done
relay

# --- part 2: our host against the kernel's target --------------------------------
host_failures=0
host() {
	local what=$1
	shift
	local out
	if out=$(in_ns timeout 300 "$BIN" host --tap tap2 --ip "$SMOL_HOST_IP/24" \
		--connect "$GUEST_IP:$PORT" --nqn "$TARGET_NQN" "$@" 2>>"$TMP/host.log"); then
		echo "$out" >>"$TMP/host.log"
		say "ok   $what: $(echo "$out" | grep -E 'IOPS|placed|^mn|^version' | head -n2 | tr -s ' ' | tr '\n' ';')"
	else
		echo "$out" >>"$TMP/host.log"
		say "FAIL $what"
		echo "$out" | sed 's/^/  /'
		host_failures=$((host_failures + 1))
	fi
}
if ((ready)); then
	for combo in "all --hdgst --ddgst" "all --ddgst" "none --ddgst" "none"; do
		set -- $combo
		off=$1
		shift
		what="our host (offload $off${*:+ $*}) -> Linux nvmet"
		host "$what: identify" --offload "$off" "$@" identify
		host "$what: write 32 MiB bs=128k" --offload "$off" "$@" io --rw write --bs 128k --size 32M --verify
		host "$what: read back bs=128k" --offload "$off" "$@" io --rw read --bs 128k --size 32M --verify
		host "$what: read back bs=4k" --offload "$off" "$@" io --rw read --bs 4k --size 4M --verify
	done
	# With every offload on, the NIC must have placed the kernel's C2HData.
	if ! grep -A3 "offload \[ddp" "$TMP/host.log" | grep -q "NIC placed [1-9]"; then
		say "FAIL our host's NIC placed nothing from the Linux target"
		host_failures=$((host_failures + 1))
	fi
	verdict=done
	((host_failures == 0)) || verdict="failed: $host_failures host checks"
	for _ in $(seq 30); do
		guest_alive || break
		in_ns timeout 5 bash -c 'echo "$2" >"/dev/tcp/$0/$1"' "$GUEST_IP" "$SIGNAL_PORT" "$verdict" 2>/dev/null && break
		sleep 1
	done
fi

guest_rc=0
wait "$GUEST_PID" || guest_rc=$?
GUEST_PID=
relay
# Both controllers must have outlived everything thrown at them.
for p in "${PIDS[@]}"; do
	kill -0 "$p" 2>/dev/null || { say "FAIL: a controller died (see its log)"; exit 1; }
done
for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
for _ in $(seq 50); do
	alive=0
	for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
	((alive)) || break
	sleep 0.1
done
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
PIDS=()
# Our smoltcp controller's NIC placed the Linux host's H2CData by TTAG.
placed=$(grep -aoE 'controller +NIC placed [^;]*' "$TMP/ctrl-smoltcp.log" | tail -n1 || true)
if [[ $placed =~ placed\ [1-9] ]]; then
	say "ok   our smoltcp controller against the Linux host: $placed"
else
	say "FAIL our smoltcp controller's NIC placed nothing from the Linux host (${placed:-no report})"
	host_failures=$((host_failures + 1))
fi

if ((VERBOSE)); then
	for f in "$TMP"/guest.out "$TMP"/*.log; do
		echo "--- $(basename "$f") ---"
		cat "$f"
	done
fi
((ready)) || { cat "$TMP/guest.out" "$TMP/guest.err" >&2; say "FAIL: the guest never got to its target (status $guest_rc)"; exit 1; }
((guest_rc == 0)) || { cat "$TMP/guest.err" >&2; say "FAIL: guest status $guest_rc"; exit 1; }
((host_failures == 0)) || { say "FAIL: $host_failures checks of our host failed"; exit 1; }
say "OK: Linux $(cat "$CACHE_DIR/kernel-release") host and target interoperate with ours ($((SECONDS - start)) s)"
