#!/bin/bash
# auth-interop.sh [-v]
#
# NVMe in-band authentication (DH-HMAC-CHAP) and host allow-lists between
# our binary and Linux 6.12, over NVMe/TCP, in one boot of the trixie guest
# (build-guest.sh --suite trixie; nvme-cli 2.13):
#
#   - a network namespace PREFIX-PID (PREFIX is $NVME_DDP_NETNS_PREFIX, or
#     nvmeddp-auth; tests/vm/netns.sh) with bridge br0 (198.18.0.1/24) and
#     TAPs tap0 (the guest, 198.18.0.10), tap1 (our smoltcp controller,
#     198.18.0.2) and tap2 (our smoltcp host, 198.18.0.3); torn down on exit
#   - secrets made here as nvme gen-dhchap-key makes them (DHHC-1:hh: with
#     32, 48 or 64 random bytes for hh 01, 02, 03 and their CRC-32), one
#     set for each host NQN; the guest checks each with nvme
#     check-dhchap-key
#   - our controller three times, each with a 128 MiB RAM namespace, no
#     --allow-any-host and a secret (--dhchap-key) and a controller secret
#     (--dhchap-ctrl-key) for the hosts it admits: over kernel TCP on
#     198.18.0.1:4420 offering ffdhe2048 (hashes by default preference, so
#     sha256) for two hosts, one of them with its secret from a file; on
#     198.18.0.1:4421 with sha512 and ffdhe8192; over smoltcp on tap1 with
#     sha384 and ffdhe3072
#   - the guest (guest/auth-interop-guest.sh) connects the Linux host to
#     them: unidirectional and bidirectional, each group and hash, secrets
#     of each hh; every success shows the namespace and verifies an 8 MiB
#     fio write, and the kernel must log the negotiated hash and group; a
#     wrong host secret, a wrong controller secret, no secret and a host not
#     on the allow-list must each be refused with no namespace left
#   - then the guest exports a null_blk through nvmet-tcp with
#     attr_allow_any_host=0 and three allowed hosts (sha256/ffdhe2048 with a
#     controller key, sha512/ffdhe8192 with one, sha384/null without), and a
#     fourth host with a secret but not allowed; our host runs `io --rw
#     randrw --time 2 --verify` as each, uni- and bidirectionally, over
#     kernel TCP and once over smoltcp on tap2, and must be refused with the
#     error that says why for a wrong secret, a wrong controller secret, no
#     secret and the host nvmet does not allow
#   - the kernel log: any NVMe line that complains fails the test, but for
#     the lines each refusal is expected to cause, and those only in that
#     refusal's window (the guest empties dmesg around each case; for our
#     host's cases this script asks it to, on $SIGNAL_PORT)
#   - our controllers logged each refusal and nothing worse, and outlived
#     everything
#
# Prints one line per check, with the time each ffdhe8192 connect took;
# -v also prints the guest's output (every case's kernel lines) and our logs.
# Exit status: 0 pass, 1 fail, 77 skipped (not root, no qemu, ...).
set -euo pipefail

HERE=$(dirname "$(readlink -f "$0")")
ROOT=$(readlink -f "$HERE/../..")
VERBOSE=0
[[ ${1:-} == -v ]] && VERBOSE=1
CACHE_DIR=${NVME_DDP_VM_CACHE:-/var/cache/nvme-ddp-vm}-trixie
BIN=${NVME_DDP_BIN:-$ROOT/target/release/nvme-ddp}
TIMEOUT=${AUTH_INTEROP_TIMEOUT:-900}

. "$HERE/netns.sh"
. "$HERE/harness.sh"
HARNESS=auth-interop
netns_name nvmeddp-auth
BRIDGE_IP=198.18.0.1
SMOL_CTRL_IP=198.18.0.2
SMOL_HOST_IP=198.18.0.3
GUEST_IP=198.18.0.10
PORT=4420
PORT_8192=4421
SIGNAL_PORT=7777
NQN=nqn.2026-11.io.nvme-ddp:auth-interop
TARGET_NQN=nqn.2026-11.org.linux:nvmet-auth
# Host NQNs: LH* the Linux host's (against our controllers), OH* ours
# (against nvmet); *X is on no allow-list. The UUID is also the host ID
# nvme connect gives (Linux refuses one host ID under two host NQNs).
uuid_nqn() { echo "nqn.2014-08.org.nvmexpress:uuid:5e1f0000-0000-4000-8000-0000000000$1"; }
LH1=$(uuid_nqn 01) LH2=$(uuid_nqn 02) LH3=$(uuid_nqn 03) LHX=$(uuid_nqn 0f)
OH1=$(uuid_nqn 11) OH2=$(uuid_nqn 12) OH3=$(uuid_nqn 13) OHX=$(uuid_nqn 1f)

harness_start 

# --- build -------------------------------------------------------------------
harness_build --suite trixie

# --- secrets -------------------------------------------------------------------
# dhchap_secret HH: a secret as `nvme gen-dhchap-key --hmac=HH` makes it:
# DHHC-1:HH:base64(key || CRC-32(key), little-endian):, the key 32, 48 or
# 64 random bytes for hh 01, 02, 03 (nvme-cli ties the length to the hash
# that transforms it). gzip's trailer is that CRC-32, little-endian, so
# nothing beyond coreutils and gzip is needed.
dhchap_secret() {
	local len
	case $1 in 01) len=32 ;; 02) len=48 ;; 03) len=64 ;; esac
	head -c "$len" /dev/urandom >"$TMP/key.bin"
	echo "DHHC-1:$1:$({ cat "$TMP/key.bin"; gzip -c "$TMP/key.bin" | tail -c 8 | head -c 4; } | base64 -w0):"
	rm -f "$TMP/key.bin"
}
LH1_KEY=$(dhchap_secret 01) LH1_CTRL=$(dhchap_secret 03)
LH2_KEY=$(dhchap_secret 02) LH2_CTRL=$(dhchap_secret 01)
LH3_KEY=$(dhchap_secret 03) LH3_CTRL=$(dhchap_secret 02)
OH1_KEY=$(dhchap_secret 01) OH1_CTRL=$(dhchap_secret 02)
OH2_KEY=$(dhchap_secret 03) OH2_CTRL=$(dhchap_secret 01)
OH3_KEY=$(dhchap_secret 02) OHX_KEY=$(dhchap_secret 01)
WRONG_KEY=$(dhchap_secret 01)
# Two are handed over in files (NQN=@FILE, --dhchap-secret @FILE), as a
# secret is best kept off the command line.
echo "$LH2_KEY" >"$TMP/lh2.key"
echo "$OH1_KEY" >"$TMP/oh1.key"

# --- namespace: bridge and three TAPs --------------------------------------------
ip netns add "$NS" || skip "cannot create a network namespace"
ip -n "$NS" link set lo up
ip -n "$NS" link add br0 type bridge
ip -n "$NS" addr add "$BRIDGE_IP/24" dev br0
ip -n "$NS" link set br0 up
for t in tap0 tap1 tap2; do
	ip -n "$NS" tuntap add dev "$t" mode tap
	ip -n "$NS" link set "$t" master br0
	ip -n "$NS" link set "$t" up
done

# --- our controllers ---------------------------------------------------------------
# No --allow-any-host: the hosts given a secret are the only ones admitted.
# (ip netns exec execs the program, so $! is the controller itself.)
ip netns exec "$NS" "$BIN" controller --listen "$BRIDGE_IP:$PORT" --ns ram:128M --nqn "$NQN" --dhchap-dhgroup ffdhe2048 \
	--dhchap-key "$LH1=$LH1_KEY" --dhchap-ctrl-key "$LH1=$LH1_CTRL" \
	--dhchap-key "$LH2=@$TMP/lh2.key" --dhchap-ctrl-key "$LH2=$LH2_CTRL" \
	>"$TMP/ctrl-ffdhe2048.log" 2>&1 &
PIDS+=($!)
ip netns exec "$NS" "$BIN" controller --listen "$BRIDGE_IP:$PORT_8192" --ns ram:128M --nqn "$NQN" \
	--dhchap-hash sha512 --dhchap-dhgroup ffdhe8192 \
	--dhchap-key "$LH3=$LH3_KEY" --dhchap-ctrl-key "$LH3=$LH3_CTRL" \
	>"$TMP/ctrl-ffdhe8192.log" 2>&1 &
PIDS+=($!)
ip netns exec "$NS" "$BIN" controller --tap tap1 --ip "$SMOL_CTRL_IP/24" --listen "0.0.0.0:$PORT" --ns ram:128M --nqn "$NQN" \
	--dhchap-hash sha384 --dhchap-dhgroup ffdhe3072 \
	--dhchap-key "$LH1=$LH1_KEY" --dhchap-ctrl-key "$LH1=$LH1_CTRL" \
	>"$TMP/ctrl-smoltcp.log" 2>&1 &
PIDS+=($!)
CTRLS="ffdhe2048 ffdhe8192 smoltcp"
for _ in $(seq 50); do
	up=1
	for c in $CTRLS; do grep -q listening "$TMP/ctrl-$c.log" || up=0; done
	((up)) && break
	sleep 0.1
done
for c in $CTRLS; do
	grep -q listening "$TMP/ctrl-$c.log" || { say "FAIL: controller $c did not start"; exit 1; }
done

# --- the guest ------------------------------------------------------------------
envs=()
for v in NQN TARGET_NQN PORT SIGNAL_PORT LH1 LH2 LH3 LHX OH1 OH2 OH3 OHX \
	LH1_KEY LH1_CTRL LH2_KEY LH2_CTRL LH3_KEY LH3_CTRL OH1_KEY OH1_CTRL OH2_KEY OH2_CTRL OH3_KEY OHX_KEY WRONG_KEY; do
	envs+=(--env "$v=${!v}")
done
"$HERE/run-guest.sh" --suite trixie --cache "$CACHE_DIR" --netns "$NS" --tap tap0 --ip "$GUEST_IP/24" \
	--script "$HERE/guest/auth-interop-guest.sh" --timeout "$TIMEOUT" "${envs[@]}" \
	--env "SIGNAL_TIMEOUT=$TIMEOUT" --env "CTRL_2048=$BRIDGE_IP:$PORT" \
	--env "CTRL_8192=$BRIDGE_IP:$PORT_8192" --env "CTRL_SMOLTCP=$SMOL_CTRL_IP:$PORT" \
	--log "$TMP/guest-console.log" >"$TMP/guest.out" 2>"$TMP/guest.err" &
GUEST_PID=$!

# Part 1 runs in the guest.
ready=0
while guest_alive && ((SECONDS - start < TIMEOUT)); do
	relay
	if console | grep -aqx GUEST-TARGET-READY; then
		ready=1
		break
	fi
	sleep 1
done
relay

# --- part 2: our host against nvmet ------------------------------------------------
if ((ready)); then
	IO=(io --rw randrw --bs 4k --time 2 --verify --eta never)
	our_host "our host -> nvmet (sha256, ffdhe2048): unidirectional, hh 01 secret" ok \
		--hostnqn "$OH1" --dhchap-secret "$OH1_KEY" "${IO[@]}"
	our_host "our host -> nvmet (sha256, ffdhe2048): bidirectional, hh 01/02 secrets (host secret from a file)" ok \
		--hostnqn "$OH1" --dhchap-secret "@$TMP/oh1.key" --dhchap-ctrl-secret "$OH1_CTRL" "${IO[@]}"
	# The time of a connect alone (admin queue and one I/O queue, each
	# authenticated), then I/O.
	our_host "our host -> nvmet (sha512, ffdhe8192): bidirectional, hh 03/01 secrets: connect + list" ok \
		--hostnqn "$OH2" --dhchap-secret "$OH2_KEY" --dhchap-ctrl-secret "$OH2_CTRL" list
	TIME_8192=$TOOK
	our_host "our host -> nvmet (sha512, ffdhe8192): bidirectional, I/O" ok \
		--hostnqn "$OH2" --dhchap-secret "$OH2_KEY" --dhchap-ctrl-secret "$OH2_CTRL" "${IO[@]}"
	our_host "our host -> nvmet (sha384, no DH): unidirectional, hh 02 secret" ok \
		--hostnqn "$OH3" --dhchap-secret "$OH3_KEY" "${IO[@]}"
	our_host "our smoltcp host (tap2) -> nvmet (sha256, ffdhe2048): bidirectional" ok \
		--tap tap2 --ip "$SMOL_HOST_IP/24" --hostnqn "$OH1" --dhchap-secret "$OH1_KEY" \
		--dhchap-ctrl-secret "$OH1_CTRL" "${IO[@]}"
	guest_check clean our host authenticated
	our_host "our host -> nvmet: wrong host secret" \
		"authentication failed on queue 0: the controller refused the host's response" \
		--hostnqn "$OH1" --dhchap-secret "$WRONG_KEY" "${IO[@]}"
	guest_check wrong-host-secret our host with a wrong secret
	our_host "our host -> nvmet: wrong controller secret" \
		"authentication failed on queue 0: the controller did not prove it holds the controller secret" \
		--hostnqn "$OH1" --dhchap-secret "$OH1_KEY" --dhchap-ctrl-secret "$WRONG_KEY" "${IO[@]}"
	guest_check wrong-ctrl-secret our host with a wrong controller secret
	our_host "our host -> nvmet: no secret" "requires host .* to authenticate" \
		--hostnqn "$OH1" "${IO[@]}"
	guest_check no-secret our host without a secret
	our_host "our host -> nvmet: host not on the allow-list" "is not allowed into the subsystem" \
		--hostnqn "$OHX" --dhchap-secret "$OHX_KEY" "${IO[@]}"
	guest_check not-allowed our host not on the allow-list
	verdict=done
	((host_failures == 0)) || verdict="done: $host_failures checks of our host failed"
	signal "$verdict" || say "FAIL: could not tell the guest we are done"
fi

guest_rc=0
wait "$GUEST_PID" || guest_rc=$?
GUEST_PID=
relay

# --- our controllers' side ------------------------------------------------------------
stop_controllers
# Each refusal was logged where it happened, and nothing worse than a
# warning, and no warning but those of the refusals: the Linux host's
# wrong secret ("authentication failed; closing the queue", then the
# connection closed for it), its AUTH_Failure2 on a wrong controller
# secret ("the host refused the controller's response", the connection
# closed for it) and the host not on the list.
expect_log() { # CTRL PATTERN WHAT
	if grep -aq "$2" "$TMP/ctrl-$1.log"; then
		say "ok   our $1 controller logged $3"
	else
		say "FAIL our $1 controller did not log $3 (/$2/)"
		host_failures=$((host_failures + 1))
	fi
}
expect_log ffdhe2048 'authentication failed; closing the queue' "the wrong host secret"
expect_log ffdhe2048 "host refused: not on the subsystem's allow-list" "the host not on its allow-list"
expect_log ffdhe2048 "the host refused the controller's response" "the Linux host's Failure2 on a wrong controller secret"
expect_log smoltcp 'authentication failed; closing the queue' "the wrong host secret"
for c in $CTRLS; do
	worse=$(grep -aE ' (ERROR|WARN) |panicked' "$TMP/ctrl-$c.log" |
		grep -avE "authentication failed; closing the queue|the host refused the controller's response|connection closed .* reason=authentication failed|host refused: not on the subsystem's allow-list" || true)
	if [[ -n $worse ]]; then
		say "FAIL our $c controller logged: $(head -n3 <<<"$worse")"
		host_failures=$((host_failures + 1))
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
((host_failures == 0)) || { say "FAIL: $host_failures checks on our side failed"; exit 1; }
t8192=$(console | grep -aoE 'ffdhe8192\): bidirectional.*nvme connect took [0-9.]+s' | grep -oE '[0-9.]+s$' || true)
say "OK: Linux $(cat "$CACHE_DIR/kernel-release") and ours authenticate each other" \
	"(ffdhe8192 connect: Linux host ${t8192:-?}, our host ${TIME_8192:-?}s with list; $((SECONDS - start)) s)"
