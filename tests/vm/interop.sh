#!/bin/bash
# interop.sh [-v]
#
# Our NVMe/TCP and NVMe/RDMA hosts and controllers against the Linux
# kernel's, in a VM (NVMe/RDMA through soft-iWARP, siw, in the guest):
#
#   - a network namespace PREFIX-PID (PREFIX is $NVME_DDP_NETNS_PREFIX, or
#     nvmeddp-io; tests/vm/netns.sh) with bridge br0 (198.18.0.1/24) and TAPs
#     tap0 (the guest), tap1 (our smoltcp NVMe/TCP controller on two
#     queues of the TAP, a thread each, 198.18.0.2), tap2 (our smoltcp host, 198.18.0.3) and tap3 (our smoltcp
#     NVMe/RDMA controller, 198.18.0.4), and a veth pair whose end veth1 is
#     on the bridge and whose end veth0 carries our smoltcp NVMe/TCP
#     controller through AF_XDP (198.18.0.5); torn down on exit
#   - our controller five times, each with a 128 MiB RAM namespace:
#     NVMe/TCP over kernel TCP on 198.18.0.1:4420, over smoltcp on tap1 and
#     over smoltcp on veth0 (--iface) with every offload on; NVMe/RDMA over
#     kernel TCP on 198.18.0.1:4421 with MPA CRCs required, and over
#     smoltcp on tap3 with every offload on (CRCs as siw asks: off)
#   - the guest (guest/interop-guest.sh) runs the Linux host against all
#     five, NVMe/TCP without and with digests: discover, connect, list,
#     id-ctrl, fio verified writes (4 jobs x 16 MiB at QD 32, 4 KiB and
#     128 KiB), disconnect, a clean kernel log
#   - recovery, the Linux host against our NVMe/TCP controller on a file
#     namespace (198.18.0.1:4422), connected with --reconnect-delay=1
#     --ctrl-loss-tmo=30: fio writes, `nvme reset` and the writes verified
#     again; then the guest asks for the controller to be killed (SIGKILL)
#     and started again on the same file and address, the Linux host
#     reconnects, and the writes are verified once more
#   - then it exports a RAM-backed namespace through nvmet-tcp (4420) and
#     nvmet-rdma (4421), and our host on tap2, over both transports with
#     offloads and digests (MPA CRCs) on and off, identifies it, writes,
#     reads back and verifies
#   - the NVMe/RDMA traffic our smoltcp ends captured dissects as iWARP
#     (MPA, DDP, RDMAP) in tshark with no malformed frame or bad CRC
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

. "$HERE/netns.sh"
. "$HERE/harness.sh"
HARNESS=interop
netns_name nvmeddp-io
BRIDGE_IP=198.18.0.1
SMOL_CTRL_IP=198.18.0.2
SMOL_HOST_IP=198.18.0.3
SMOL_RDMA_IP=198.18.0.4
SMOL_IFACE_IP=198.18.0.5
GUEST_IP=198.18.0.10
PORT=4420
RDMA_PORT=4421
RESTART_PORT=4422
SIGNAL_PORT=7777
NQN=nqn.2026-11.io.nvme-ddp:interop
TARGET_NQN=nqn.2026-11.org.linux:nvmet-ram

harness_start tshark

# --- build -------------------------------------------------------------------
harness_build

# --- namespace: bridge, four TAPs and a veth pair --------------------------------
ip netns add "$NS" || skip "cannot create a network namespace"
ip -n "$NS" link set lo up
ip -n "$NS" link add br0 type bridge
ip -n "$NS" addr add "$BRIDGE_IP/24" dev br0
ip -n "$NS" link set br0 up
for t in tap0 tap1 tap2 tap3; do
	# tap1 has two queues, one for each thread of our smoltcp controller.
	mq=()
	[[ $t == tap1 ]] && mq=(multi_queue)
	ip -n "$NS" tuntap add dev "$t" mode tap "${mq[@]}"
	ip -n "$NS" link set "$t" master br0
	ip -n "$NS" link set "$t" up
done
# veth0 has no address: its frames go to our AF_XDP socket, not the kernel.
# At the bridge's MTU of 1500 its frames fit a UMEM chunk, so --iface
# takes AF_XDP (a veth at 9000 gets AF_PACKET, as tests/smoltcp.rs checks).
ip -n "$NS" link add veth0 type veth peer veth1
ip -n "$NS" link set veth1 master br0
ip -n "$NS" link set veth1 up
ip -n "$NS" link set veth0 up

# --- our controllers -------------------------------------------------------------
# (ip netns exec execs the program, so $! is the controller itself.)
ip netns exec "$NS" "$BIN" controller --allow-any-host --listen "$BRIDGE_IP:$PORT" --ns ram:128M --nqn "$NQN" \
	>"$TMP/ctrl-kernel-tcp.log" 2>&1 &
PIDS+=($!)
ip netns exec "$NS" "$BIN" controller --allow-any-host --tap tap1 --tap-queues 2 --ip "$SMOL_CTRL_IP/24" \
	--listen "0.0.0.0:$PORT" --ns ram:128M --nqn "$NQN" --offload all >"$TMP/ctrl-smoltcp.log" 2>&1 &
PIDS+=($!)
ip netns exec "$NS" "$BIN" controller --allow-any-host --iface veth0 --ip "$SMOL_IFACE_IP/24" --listen "0.0.0.0:$PORT" \
	--ns ram:128M --nqn "$NQN" --offload all >"$TMP/ctrl-iface.log" 2>&1 &
PIDS+=($!)
ip netns exec "$NS" "$BIN" controller --allow-any-host --transport rdma --ddgst --listen "$BRIDGE_IP:$RDMA_PORT" \
	--ns ram:128M --nqn "$NQN" >"$TMP/ctrl-kernel-tcp-rdma.log" 2>&1 &
PIDS+=($!)
ip netns exec "$NS" "$BIN" controller --allow-any-host --transport rdma --tap tap3 --ip "$SMOL_RDMA_IP/24" \
	--listen "0.0.0.0:$PORT" --ns ram:128M --nqn "$NQN" --offload all \
	--pcap "$TMP/ctrl-smoltcp-rdma.pcap" >"$TMP/ctrl-smoltcp-rdma.log" 2>&1 &
PIDS+=($!)
# The one the guest has killed and started again, on a file namespace.
truncate -s 64M "$TMP/restart.img"
restart_ctrl() {
	ip netns exec "$NS" "$BIN" controller --allow-any-host --listen "$BRIDGE_IP:$RESTART_PORT" \
		--ns "file:$TMP/restart.img" --nqn "$NQN" >>"$TMP/ctrl-restart.log" 2>&1 &
	RESTART_PID=$!
	PIDS+=("$RESTART_PID")
}
restart_ctrl
CTRLS="kernel-tcp smoltcp iface kernel-tcp-rdma smoltcp-rdma restart"
for _ in $(seq 50); do
	up=1
	for c in $CTRLS; do grep -q listening "$TMP/ctrl-$c.log" || up=0; done
	((up)) && break
	sleep 0.1
done
for c in $CTRLS; do
	grep -q listening "$TMP/ctrl-$c.log" || { say "FAIL: controller $c did not start"; exit 1; }
done

# --- the guest --------------------------------------------------------------------
"$HERE/run-guest.sh" --cache "$CACHE_DIR" --netns "$NS" --tap tap0 --ip "$GUEST_IP/24" \
	--script "$HERE/guest/interop-guest.sh" --timeout "$TIMEOUT" \
	--env "NQN=$NQN" --env "TARGET_NQN=$TARGET_NQN" --env "PORT=$PORT" \
	--env "RDMA_PORT=$RDMA_PORT" --env "SIGNAL_PORT=$SIGNAL_PORT" --env "SIGNAL_TIMEOUT=$TIMEOUT" \
	--env "RESTART_TARGET=$BRIDGE_IP:$RESTART_PORT" \
	--env "TARGETS=kernel-tcp=tcp:$BRIDGE_IP:$PORT smoltcp=tcp:$SMOL_CTRL_IP:$PORT iface=tcp:$SMOL_IFACE_IP:$PORT kernel-tcp-rdma-crc=rdma:$BRIDGE_IP:$RDMA_PORT smoltcp-rdma=rdma:$SMOL_RDMA_IP:$PORT" \
	--log "$TMP/guest-console.log" >"$TMP/guest.out" 2>"$TMP/guest.err" &
GUEST_PID=$!

# Part 1 runs in the guest; its verdicts are relayed as they come.
ready=0
restarted=0
while guest_alive && ((SECONDS - start < TIMEOUT)); do
	relay
	# The guest asks for its controller to die under it and come back.
	if ((!restarted)) && grep -aq GUEST-RESTART-CTRL "$TMP/guest-console.log" 2>/dev/null; then
		restarted=1
		kill -KILL "$RESTART_PID"
		wait "$RESTART_PID" 2>/dev/null || true
		alive=()
		for p in "${PIDS[@]}"; do [[ $p == "$RESTART_PID" ]] || alive+=("$p"); done
		PIDS=("${alive[@]}")
		sleep 2
		restart_ctrl
		say "ok   our controller on $BRIDGE_IP:$RESTART_PORT killed (SIGKILL) and started again"
	fi
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
		--nqn "$TARGET_NQN" "$@" 2>>"$TMP/host.log"); then
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
	for combo in "tcp all --hdgst --ddgst" "tcp all --ddgst" "tcp none --ddgst" "tcp none" \
		"rdma all --ddgst" "rdma all" "rdma none --ddgst" "rdma none"; do
		set -- $combo
		tr=$1 off=$2
		shift 2
		port=$PORT
		[[ $tr == rdma ]] && port=$RDMA_PORT
		set -- --transport "$tr" --connect "$GUEST_IP:$port" --offload "$off" "$@"
		# One NVMe/RDMA run with CRCs is captured for tshark.
		[[ $combo == "rdma all --ddgst" ]] && set -- "$@" --pcap "$TMP/host-rdma.pcap"
		what="our host ($combo) -> Linux nvmet-$tr"
		host "$what: identify" "$@" identify
		host "$what: write 32 MiB bs=128k" "$@" io --rw write --bs 128k --size 32M --verify
		host "$what: read back bs=128k" "$@" io --rw read --bs 128k --size 32M --verify
		host "$what: read back bs=4k" "$@" io --rw read --bs 4k --size 4M --verify
	done
	# With every offload on, the NIC must have placed the kernel's C2HData
	# (NVMe/TCP) and RDMA Writes (NVMe/RDMA).
	placed=$(grep -A1 "offload \[all\]" "$TMP/host.log" | grep -c "NIC placed [1-9]" || true)
	if ((placed < 2)); then
		say "FAIL our host's NIC placed nothing from the Linux target on some transport"
		host_failures=$((host_failures + 1))
	fi
	# No fault here is fatal: our host never had to make a new association.
	if grep -q "recovery: [1-9]" "$TMP/host.log"; then
		say "FAIL our host reconnected to the Linux target: $(grep "recovery: [1-9]" "$TMP/host.log" | head -n1)"
		host_failures=$((host_failures + 1))
	fi
	verdict=done
	((host_failures == 0)) || verdict="failed: $host_failures host checks"
	signal "$verdict" || say "FAIL: could not tell the guest we are done"
fi

guest_rc=0
wait "$GUEST_PID" || guest_rc=$?
GUEST_PID=
relay
# Every controller must have outlived everything thrown at it (but the
# one killed on purpose, which was started again).
stop_controllers
# Our smoltcp controllers' NICs placed the Linux host's H2CData by TTAG
# and its Read Responses by STag.
# The guest's segments reach veth0 with their checksums left partial
# (a bridge port on this host); AF_XDP carries no word of that, and the
# medium must finish them or nothing connects.
if grep -aq 'via="AF_XDP' "$TMP/ctrl-iface.log"; then
	say "ok   our iface controller ran over AF_XDP"
else
	say "FAIL our iface controller did not run over AF_XDP: $(grep -a 'link open' "$TMP/ctrl-iface.log")"
	host_failures=$((host_failures + 1))
fi
# (The smoltcp controller reports each of its two queues; the Linux host's
# ports decide which queue each connection takes.)
for c in smoltcp iface smoltcp-rdma; do
	placed=$(grep -aoE 'controller( queue [0-9]+ \([0-9]+ connections\))? +NIC placed [^;]*' \
		"$TMP/ctrl-$c.log" | paste -sd';' || true)
	if [[ $placed =~ placed\ [1-9] ]]; then
		say "ok   our $c controller against the Linux host: $placed"
	else
		say "FAIL our $c controller's NIC placed nothing from the Linux host (${placed:-no report})"
		host_failures=$((host_failures + 1))
	fi
done

# The NVMe/RDMA captures dissect as iWARP: MPA Request and Reply, DDP and
# RDMAP in every FPDU, good CRCs where they were on (our host asks), no
# malformed frame and no expert error. Port 4420 is NVMe/TCP's to tshark,
# so that dissector is turned off for the MPA heuristic to see the
# connection. tshark's MPA reassembly loses its place after any gap in the
# stream (the slow guest drops frames: retransmissions, segments the
# capture missed, segments out of order) and then reports bad CRCs and
# malformed frames the bytes do not have, so complaints count only in a
# capture whose TCP streams tshark found whole.
for pcap in "$TMP/ctrl-smoltcp-rdma.pcap" "$TMP/host-rdma.pcap"; do
	name=$(basename "$pcap" .pcap)
	counts=$(tshark -n -r "$pcap" --disable-protocol nvme-tcp -V -O iwarp_mpa,tcp 2>>"$TMP/tshark.log" |
		grep -oE 'Request frame|Reply frame|^iWARP Direct Data Placement|Good CRC32|Bad CRC32|Malformed|Expert Info \(Error|Sequence\): (This frame is a \(suspected\)|Previous segment|ACKed segment)' |
		sort | uniq -c || true)
	n() { awk -v k="$1" 'index($0, k) { s += $1 } END { print s + 0 }' <<<"$counts"; }
	req=$(n 'Request frame') rep=$(n 'Reply frame') ddp=$(n 'iWARP Direct') good=$(n 'Good CRC32')
	bad=$(($(n 'Bad CRC32') + $(n Malformed) + $(n 'Expert Info'))) gap=$(n 'Sequence): ')
	want_good=1
	[[ $name == ctrl-* ]] && want_good=0 # siw asks for no CRCs
	summary="$req MPA Requests, $rep Replies, $ddp DDP/RDMAP FPDUs, $good good CRCs, $bad complaints, $gap TCP segments retransmitted, missed or out of order"
	if ((req > 0 && rep > 0 && ddp > 0 && (good > 0 || !want_good) && (bad == 0 || gap > 0))); then
		say "ok   tshark: $name: $summary"
	else
		say "FAIL tshark: $name: $summary"
		host_failures=$((host_failures + 1))
		# The complaints, by frame, for whoever reads the log.
		tshark -n -r "$pcap" --disable-protocol nvme-tcp -V -O iwarp_mpa 2>&1 |
			grep -E '^Frame [0-9]+:|Bad CRC32|Malformed|Expert Info \(Error' | grep -B1 -vE '^Frame' |
			head -n 40 | sed "s/^/$name: /" >>"$TMP/tshark.log" || true
	fi
done

if ((VERBOSE)); then
	for f in "$TMP"/guest.out "$TMP"/*.log; do
		echo "--- $(basename "$f") ---"
		cat "$f"
	done
fi
((ready)) || { cat "$TMP/guest.out" "$TMP/guest.err" >&2; say "FAIL: the guest never got to its target (status $guest_rc)"; exit 1; }
((guest_rc == 0)) || { cat "$TMP/guest.err" >&2; say "FAIL: guest status $guest_rc"; exit 1; }
((host_failures == 0)) || { say "FAIL: $host_failures checks of our host failed"; exit 1; }
((restarted)) || { say "FAIL: the guest never asked for the controller restart"; exit 1; }
say "OK: Linux $(cat "$CACHE_DIR/kernel-release") host and target interoperate with ours ($((SECONDS - start)) s)"
