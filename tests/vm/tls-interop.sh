#!/bin/bash
# tls-interop.sh [-v]
#
# NVMe/TCP over TLS 1.3 with a PSK between our binary and Linux 6.12 (the
# kernel's NVMe/TCP host and nvmet-tcp, the handshakes done by tlshd from
# ktls-utils 1.0.0 with GnuTLS), in one boot of the trixie guest
# (build-guest.sh --suite trixie; nvme-cli 2.13 / libnvme 1.13):
#
#   - a network namespace PREFIX-PID (PREFIX is $NVME_DDP_NETNS_PREFIX, or
#     nvmeddp-tls; tests/vm/netns.sh) with bridge br0 (198.18.0.1/24) and
#     TAPs tap0 (the guest, 198.18.0.10), tap1 (our smoltcp controller,
#     198.18.0.2) and tap2 (our smoltcp host, 198.18.0.3); torn down on exit
#   - a configured PSK made here as `nvme gen-tls-key` makes it
#     (NVMeTLSkey-1:01: with 32 random bytes and their CRC-32), and a
#     second one that is nobody's; the guest checks both with nvme
#     check-tls-key
#   - our controller three times, each with a 128 MiB RAM namespace,
#     --allow-any-host and the configured PSK with --tls-compat (the TLS PSK
#     derived as libnvme 1.13 derives it): over kernel TCP on
#     198.18.0.1:4420 with --tls required, over smoltcp on tap1 with --tls
#     required (the key from a file), and over kernel TCP on
#     198.18.0.1:4421 with --tls optional
#   - the guest (guest/tls-interop-guest.sh) starts tlshd, puts the TLS PSKs
#     into the .nvme keyring (identity v0 and v1, nvme check-tls-key
#     --insert) and connects the Linux host to them with `nvme connect
#     --tls` (also with header and data digests, and once letting nvme
#     connect --tls-key=KEY insert the key): every connect shows the
#     namespace, verifies an 8 MiB fio write and uses the key inserted; a
#     TLS PSK derived from the other configured PSK and a host in the clear
#     on a TLS-required port are refused; the optional port admits a host
#     in the clear and over TLS, and its discovery log entry says TREQ not
#     required, TSAS TLS 1.3
#   - then it exports a null_blk through nvmet-tcp on a port with addr_tsas
#     tls1.3 and addr_treq required, with TLS PSKs for two of our host NQNs
#     (identity v0 and v1); our host runs `io --rw randrw --time 2
#     --verify` with --tls --tls-compat and the identity inserted, without
#     and with header and data digests, and once over smoltcp on tap2; it
#     must be refused with "TLS handshake failed" with another configured
#     PSK and with an identity nvmet has no key for, and fail in the clear
#   - the kernel log and tlshd's: any complaint fails the test but for the
#     lines each refusal is expected to cause, in that refusal's window
#     (the guest empties dmesg around each case; for our host's cases this
#     script asks it to, on $SIGNAL_PORT)
#   - captures (dumpcap on br0) of all traffic to our smoltcp controller and
#     of one of our host's runs against nvmet: every byte of every TCP
#     stream in both directions must be TLS records (handshake first, then
#     only application data: no NVMe/TCP PDU in the clear), tshark must see
#     the ClientHello offer the NVMe PSK identity and the ServerHello pick
#     TLS_AES_128_GCM_SHA256 with an (EC)DHE key share
#   - our controllers logged each refusal and nothing worse, and outlived
#     everything
#
# Prints one line per check; -v also prints the guest's output (every case's
# kernel and tlshd lines) and our logs.
# Exit status: 0 pass, 1 fail, 77 skipped (not root, no qemu, ...).
set -euo pipefail

HERE=$(dirname "$(readlink -f "$0")")
ROOT=$(readlink -f "$HERE/../..")
VERBOSE=0
[[ ${1:-} == -v ]] && VERBOSE=1
CACHE_DIR=${NVME_DDP_VM_CACHE:-/var/cache/nvme-ddp-vm}-trixie
BIN=${NVME_DDP_BIN:-$ROOT/target/release/nvme-ddp}
TIMEOUT=${TLS_INTEROP_TIMEOUT:-900}

. "$HERE/netns.sh"
. "$HERE/harness.sh"
HARNESS=tls-interop
netns_name nvmeddp-tls
BRIDGE_IP=198.18.0.1
SMOL_CTRL_IP=198.18.0.2
SMOL_HOST_IP=198.18.0.3
GUEST_IP=198.18.0.10
PORT=4420
OPT_PORT=4421
SIGNAL_PORT=7777
NQN=nqn.2026-11.io.nvme-ddp:tls-interop
TARGET_NQN=nqn.2026-11.org.linux:nvmet-tls
# Host NQNs: LH* the Linux host's (against our controllers), OH* ours
# (against nvmet). The UUID is also the host ID nvme connect gives.
uuid_nqn() { echo "nqn.2014-08.org.nvmexpress:uuid:7e150000-0000-4000-8000-0000000000$1"; }
LH0=$(uuid_nqn 00) LH1=$(uuid_nqn 01) LH2=$(uuid_nqn 02) LHW=$(uuid_nqn 0f)
OH0=$(uuid_nqn 10) OH1=$(uuid_nqn 11)

harness_start tshark dumpcap

# --- build -------------------------------------------------------------------
harness_build --suite trixie

# --- keys ----------------------------------------------------------------------
# tls_key: a configured PSK as `nvme gen-tls-key` (hmac 1) makes it:
# NVMeTLSkey-1:01:base64(key || CRC-32(key), little-endian):, the key 32
# random bytes. gzip's trailer is that CRC-32, little-endian.
tls_key() {
	head -c 32 /dev/urandom >"$TMP/key.bin"
	echo "NVMeTLSkey-1:01:$({ cat "$TMP/key.bin"; gzip -c "$TMP/key.bin" | tail -c 8 | head -c 4; } | base64 -w0):"
	rm -f "$TMP/key.bin"
}
TLS_KEY=$(tls_key)
WRONG_KEY=$(tls_key)
# Handed over in a file once on each side (--tls-key @FILE).
echo "$TLS_KEY" >"$TMP/tls.key"

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
# Where the captures' probes go: an address no one holds, its neighbour
# entry fixed so that a probe needs no ARP answer (nothing listens).
PROBE_IP=198.18.0.250
ip -n "$NS" neigh replace "$PROBE_IP" lladdr 02:00:00:00:00:fa dev br0 nud permanent

# --- captures --------------------------------------------------------------------
# capture_start NAME FILTER: dumpcap on br0 into $TMP/NAME.pcap, until
# capture_stop. A large buffer: the guest's bursts must not be dropped.
capture_start() {
	: >"$TMP/$1.dumpcap.log"
	# dumpcap says "Capturing on" a while before packets reach its file
	# (on a busy machine, long enough to miss a whole connection): it also
	# takes UDP probes to $PROBE_IP, and the capture starts once one is in
	# the file. The checks read TCP only.
	local probe="udp and dst host $PROBE_IP and dst port 9"
	# (ip netns exec execs dumpcap: $! is dumpcap itself, which SIGINT stops.)
	ip netns exec "$NS" dumpcap -q -i br0 -B 64 -s 0 -f "($2) or ($probe)" -w "$TMP/$1.pcap" \
		>"$TMP/$1.dumpcap.log" 2>&1 &
	CAP_PID=$!
	for _ in $(seq 100); do
		kill -0 "$CAP_PID" 2>/dev/null || break
		if grep -q "Capturing on" "$TMP/$1.dumpcap.log"; then
			ip netns exec "$NS" bash -c "echo probe >/dev/udp/$PROBE_IP/9" 2>/dev/null || true
			tshark -n -r "$TMP/$1.pcap" -Y 'udp.dstport == 9' 2>/dev/null | grep -q . && return 0
		fi
		sleep 0.1
	done
	say "FAIL: dumpcap did not start: $(tr '\n' ' ' <"$TMP/$1.dumpcap.log")"
	return 1
}
capture_stop() {
	[[ -n $CAP_PID ]] || return 0
	sleep 0.5 # the last segments
	kill -INT "$CAP_PID" 2>/dev/null || true
	wait "$CAP_PID" 2>/dev/null || true
	CAP_PID=
}

# nic_took WHO REPORT: our software NIC decrypted records in WHO's offload
# report (its TLS line), encrypted records, and digested data inside them.
nic_took() {
	local line
	line=$(grep -aE 'TLS: NIC decrypted' <<<"$2" | tail -n1)
	if grep -qE 'decrypted [1-9][0-9]* records .*encrypted [1-9][0-9]* records' <<<"$line" &&
		grep -aqE 'NIC placed .* and digested [1-9]' <<<"$2"; then
		say "ok   our $1's NIC took the records over:$(sed 's/^.*TLS://' <<<"$line" | cut -c1-160)"
	else
		say "FAIL our $1's NIC did not take the records over: ${line:-no TLS line}"
		host_failures=$((host_failures + 1))
	fi
}

# --- our controllers ---------------------------------------------------------------
# (ip netns exec execs the program, so $! is the controller itself.)
TLS=(--tls-compat)
ip netns exec "$NS" "$BIN" controller --allow-any-host --listen "$BRIDGE_IP:$PORT" --ns ram:128M --nqn "$NQN" \
	--tls required --tls-key "$TLS_KEY" "${TLS[@]}" >"$TMP/ctrl-tcp.log" 2>&1 &
PIDS+=($!)
ip netns exec "$NS" "$BIN" controller --allow-any-host --tap tap1 --ip "$SMOL_CTRL_IP/24" --listen "0.0.0.0:$PORT" \
	--ns ram:128M --nqn "$NQN" --tls required --tls-key "@$TMP/tls.key" "${TLS[@]}" >"$TMP/ctrl-smoltcp.log" 2>&1 &
PIDS+=($!)
ip netns exec "$NS" "$BIN" controller --allow-any-host --listen "$BRIDGE_IP:$OPT_PORT" --ns ram:128M --nqn "$NQN" \
	--tls optional --tls-key "$TLS_KEY" "${TLS[@]}" >"$TMP/ctrl-optional.log" 2>&1 &
PIDS+=($!)
CTRLS="tcp smoltcp optional"
for _ in $(seq 50); do
	up=1
	for c in $CTRLS; do grep -q listening "$TMP/ctrl-$c.log" || up=0; done
	((up)) && break
	sleep 0.1
done
for c in $CTRLS; do
	grep -q listening "$TMP/ctrl-$c.log" || { say "FAIL: controller $c did not start"; exit 1; }
done

# Everything the Linux host sends our smoltcp controller is captured: it
# only ever connects there over TLS.
capture_start ctrl-smoltcp "host $SMOL_CTRL_IP and tcp port $PORT" || exit 1

# --- the guest ------------------------------------------------------------------
envs=()
for v in NQN TARGET_NQN PORT SIGNAL_PORT SMOL_HOST_IP LH0 LH1 LH2 LHW OH0 OH1 TLS_KEY WRONG_KEY; do
	envs+=(--env "$v=${!v}")
done
"$HERE/run-guest.sh" --suite trixie --cache "$CACHE_DIR" --netns "$NS" --tap tap0 --ip "$GUEST_IP/24" \
	--script "$HERE/guest/tls-interop-guest.sh" --timeout "$TIMEOUT" "${envs[@]}" \
	--env "SIGNAL_TIMEOUT=$TIMEOUT" --env "CTRL_TCP=$BRIDGE_IP:$PORT" \
	--env "CTRL_SMOLTCP=$SMOL_CTRL_IP:$PORT" --env "CTRL_OPTIONAL=$BRIDGE_IP:$OPT_PORT" \
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
capture_stop

# --- part 2: our host against nvmet ------------------------------------------------
if ((ready)); then
	IO=(io --rw randrw --bs 4k --time 2 --verify --eta never)
	our_host "our host -> nvmet TLS port: identity v0" ok \
		--hostnqn "$OH0" --tls --tls-key "$TLS_KEY" "${TLS[@]}" --tls-identity 0 "${IO[@]}"
	# This one is captured.
	capture_start host-nvmet "host $GUEST_IP and tcp port $PORT" || host_failures=$((host_failures + 1))
	our_host "our host -> nvmet TLS port: identity v1, header and data digests (key from a file)" ok \
		--hostnqn "$OH1" --tls --tls-key "@$TMP/tls.key" "${TLS[@]}" --tls-identity 1 --hdgst --ddgst "${IO[@]}"
	capture_stop
	our_host "our smoltcp host (tap2) -> nvmet TLS port: identity v1, data digest" ok \
		--tap tap2 --ip "$SMOL_HOST_IP/24" --hostnqn "$OH1" --tls --tls-key "$TLS_KEY" "${TLS[@]}" \
		--tls-identity 1 --ddgst "${IO[@]}"
	# Its NIC took the records over from Linux's kTLS both ways, and
	# digested inside them.
	nic_took host "$(sed -n '/^### our smoltcp host/,/^### /p' "$TMP/host.log")"
	guest_check clean our host over TLS
	# The refused handshakes are captured too: what tlshd answers.
	capture_start host-refused "host $GUEST_IP and tcp port $PORT" || host_failures=$((host_failures + 1))
	our_host "our host -> nvmet TLS port: TLS PSK from another configured PSK" "TLS handshake failed" \
		--hostnqn "$OH0" --tls --tls-key "$WRONG_KEY" "${TLS[@]}" --tls-identity 0 "${IO[@]}"
	guest_check wrong-psk our host with another configured PSK
	our_host "our host -> nvmet TLS port: identity v1 where nvmet has only v0's key" "TLS handshake failed" \
		--hostnqn "$OH0" --tls --tls-key "$TLS_KEY" "${TLS[@]}" --tls-identity 1 "${IO[@]}"
	guest_check no-key our host with an identity nvmet has no key for
	capture_stop
	# nvmet gives the ICReq to tlshd as if it were a ClientHello, which
	# fails, and closes the connection: our host names the flags.
	our_host "our host -> nvmet TLS port: in the clear" \
		"queue 0: the controller closed the connection without answering ICReq: if its port requires TLS, connect with --tls and --tls-key" \
		--hostnqn "$OH0" "${IO[@]}"
	guest_check clear our host in the clear
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
nic_took "smoltcp controller" "$(cat "$TMP/ctrl-smoltcp.log")"
# Each refusal was logged where it happened, and nothing worse than a
# warning, and no warning but those of the refusals.
expect_log() { # CTRL PATTERN WHAT
	if grep -aq "$2" "$TMP/ctrl-$1.log"; then
		say "ok   our $1 controller logged $3: $(grep -a "$2" "$TMP/ctrl-$1.log" | head -n1 | sed 's/^.*\(INFO\|WARN\)//' | cut -c1-200)"
	else
		say "FAIL our $1 controller did not log $3 (/$2/)"
		host_failures=$((host_failures + 1))
	fi
}
# Each refusal names the fix: the key (or --tls-compat), or --tls.
expect_log tcp "not this port's --tls-key, or the host is Linux .* --tls-compat" "the Linux host's wrong PSK"
expect_log tcp 'the host spoke NVMe/TCP in the clear on a port that requires TLS: connect with --tls' "the Linux host's ICReq in the clear"
expect_log smoltcp "not this port's --tls-key, or the host is Linux .* --tls-compat" "the Linux host's wrong PSK"
for c in $CTRLS; do
	worse=$(grep -aE ' (ERROR|WARN) |panicked' "$TMP/ctrl-$c.log" |
		grep -avE "TLS failed; closing the connection|connection closed .* reason=.*TLS" || true)
	if [[ -n $worse ]]; then
		say "FAIL our $c controller logged: $(head -n3 <<<"$worse")"
		host_failures=$((host_failures + 1))
	fi
done

# --- the captures ------------------------------------------------------------------
# tls_walk PCAP: every TCP stream of PCAP, both directions, read as TLS
# records from the first byte on (tshark reassembles the stream): one line
# per stream and direction, "STREAM DIR OK|BAD ... counts", BAD if any byte
# is not part of a TLS 1.3 record (type 20-23, legacy version 0x0303, or
# 0x0301 in the ClientHello's record, length at most 2^14 + 256), the
# client does not start with a handshake record, or a handshake record
# comes after application data (TLS 1.3 encrypts all that follows the
# handshake as application data). An ICReq in the clear would start with
# type 00h.
tls_walk() {
	local pcap=$1 s
	for s in $(tshark -n -r "$pcap" -Y tcp -T fields -e tcp.stream 2>/dev/null | sort -un); do
		tshark -n -r "$pcap" -q -z "follow,tcp,raw,$s" 2>/dev/null | awk -v stream="$s" '
			function hexval(h,   i, v) {
				v = 0
				for (i = 1; i <= length(h); i++) v = v * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1
				return v
			}
			function fail(d, why) { if (!bad[d]) bad[d] = why " at byte " off[d] }
			function feed(d, h,   n, take, type, ver, len) {
				while (length(h) > 0 && !bad[d]) {
					if (need[d] > 0) {
						n = length(h) / 2
						take = n < need[d] ? n : need[d]
						need[d] -= take
						off[d] += take
						h = substr(h, take * 2 + 1)
						continue
					}
					take = 10 - length(hdr[d])
					hdr[d] = hdr[d] substr(h, 1, take)
					h = substr(h, take + 1)
					if (length(hdr[d]) < 10) break
					type = substr(hdr[d], 1, 2); ver = substr(hdr[d], 3, 4); len = hexval(substr(hdr[d], 7, 4))
					if (type !~ /^1[4-7]$/) { fail(d, "not a TLS record (" hdr[d] "...)"); break }
					if (ver != "0303" && !(ver == "0301" && nrec[d] == 0)) { fail(d, "record version " ver); break }
					if (len == 0 || len > 16640) { fail(d, "record length " len); break }
					if (nrec[d] == 0 && d == 0 && type != "16") { fail(d, "client starts with record type " type); break }
					if (type == "16" && cnt[d, "17"] > 0) { fail(d, "handshake record after application data"); break }
					cnt[d, type]++
					nrec[d]++
					bytes[d] += len
					need[d] = len
					off[d] += 5
					hdr[d] = ""
				}
			}
			/^Node 1: / { started = 1; next }
			/^=+$/ { if (started) ended = 1; next }
			!started || ended { next }
			{ d = ($0 ~ /^\t/) ? 1 : 0; h = $0; gsub(/[\t ]/, "", h); feed(d, tolower(h)) }
			END {
				for (d = 0; d <= 1; d++) {
					if (!bad[d] && (need[d] > 0 || hdr[d] != "")) part = " (last record cut short)"; else part = ""
					printf "%s %s %s records=%d handshake=%d ccs=%d alert=%d appdata=%d bytes=%d%s%s\n", stream,
						d ? "server" : "client", bad[d] ? "BAD" : "OK", nrec[d], cnt[d, "16"], cnt[d, "14"],
						cnt[d, "15"], cnt[d, "17"], bytes[d], bad[d] ? ": " bad[d] : "", part
				}
			}'
	done
}
# unhex HEX: the bytes as text.
unhex() { printf '%b' "$(sed 's/[^0-9a-fA-F]//g; s/../\\x&/g' <<<"$1")"; }
# check_capture NAME WHAT IDENTITY_ERE: the capture's streams are TLS only,
# with application data both ways in at least one, and its handshakes are
# TLS 1.3, TLS_AES_128_GCM_SHA256, (EC)DHE, the PSK identity IDENTITY_ERE.
check_capture() {
	local name=$1 what=$2 want_id=$3 pcap=$TMP/$1.pcap walk ids suites lost
	[[ -s $pcap ]] || { say "FAIL capture $what: no capture"; host_failures=$((host_failures + 1)); return; }
	walk=$(tls_walk "$pcap")
	echo "$walk" >"$TMP/$name.walk.log"
	lost=$(tshark -n -r "$pcap" -Y 'tcp.analysis.lost_segment || tcp.analysis.ack_lost_segment' 2>/dev/null | wc -l)
	local streams=$(awk '{ print $1 }' <<<"$walk" | sort -u | grep -c . || true)
	local badl=$(grep -c ' BAD ' <<<"$walk" || true)
	local data=$(awk '$2 == "client" && $3 == "OK" { split($8, a, "="); if (a[2] > 0) c[$1] = 1 }
		$2 == "server" && $3 == "OK" { split($8, a, "="); if (a[2] > 0) s[$1] = 1 }
		END { n = 0; for (k in c) if (k in s) n++; print n }' <<<"$walk")
	local app=$(awk '{ split($8, a, "="); n += a[2]; split($9, b, "="); m += b[2] } END { printf "%d application data records, %d bytes in all records", n, m }' <<<"$walk")
	# What tshark makes of the handshakes (port 4420 is NVMe/TCP's to it).
	local T=(tshark -n -r "$pcap" -d "tcp.port==$PORT,tls")
	ids=$("${T[@]}" -Y 'tls.handshake.type == 1' -T fields -e tls.handshake.extensions.psk.identity.identity 2>/dev/null |
		while read -r h; do unhex "$h"; echo; done | sort | uniq -c | sed 's/^ *//' | paste -sd';')
	suites=$("${T[@]}" -Y 'tls.handshake.type == 2' -T fields -e tls.handshake.ciphersuite \
		-e tls.handshake.extensions.supported_version -e tls.handshake.extensions_key_share_group \
		-e tls.handshake.extensions.psk.identity.selected 2>/dev/null | sort | uniq -c | sed 's/^ *//' | tr '\t' ' ' | paste -sd';')
	local summary="$streams TCP streams, application data both ways in $data; $app;"
	summary+=" ClientHello PSK identities: ${ids:-none}; ServerHello (suite, version, group, selected): ${suites:-none}"
	if ((badl == 0 && data > 0)) && grep -qE "$want_id" <<<"$ids" && [[ -n $suites ]] &&
		! grep -qvE '^[0-9]+ 0x1301 0x0304 [0-9a-fx]+ 0$' <<<"$(tr ';' '\n' <<<"$suites")"; then
		say "ok   capture $what: only TLS records, no NVMe/TCP in the clear: $summary"
	else
		say "FAIL capture $what: $summary; $lost segments lost; streams:"
		sed 's/^/  /' <<<"$walk"
		host_failures=$((host_failures + 1))
	fi
}
check_capture ctrl-smoltcp "Linux host -> our smoltcp controller" "NVMe[01]R01 $LH0 $NQN"
((ready)) && check_capture host-nvmet "our host -> nvmet" "NVMe1R01 $OH1 $TARGET_NQN [A-Za-z0-9+/]{43}="
# The refused handshakes: our host sent only TLS (its ClientHello); what
# nvmet's tlshd answered is reported (1.0.0 sends no alert: the connection
# is closed under the ClientHello).
if ((ready)) && [[ -s $TMP/host-refused.pcap ]]; then
	walk=$(tls_walk "$TMP/host-refused.pcap")
	echo "$walk" >"$TMP/host-refused.walk.log"
	answers=$(awk '$2 == "server" { print $4 == "records=0" ? "nothing" : $7 }' <<<"$walk" | sort | uniq -c |
		sed 's/^ *//' | paste -sd',')
	if ! grep -q ' BAD ' <<<"$walk" && [[ $(grep -c ' client OK records=1 handshake=1 ' <<<"$walk") == 2 ]]; then
		say "ok   capture our host -> nvmet, refused: a ClientHello alone in each of 2 connections; nvmet (tlshd) answered: $answers"
	else
		say "FAIL capture our host -> nvmet, refused: streams:"
		sed 's/^/  /' <<<"$walk"
		host_failures=$((host_failures + 1))
	fi
fi

if ((VERBOSE)); then
	for f in "$TMP"/guest.out "$TMP"/*.log; do
		echo "--- $(basename "$f") ---"
		cat "$f"
	done
fi
((ready)) || { cat "$TMP/guest.out" "$TMP/guest.err" >&2; say "FAIL: the guest never got to its target (status $guest_rc)"; exit 1; }
((guest_rc == 0)) || { cat "$TMP/guest.err" >&2; say "FAIL: guest status $guest_rc"; exit 1; }
((host_failures == 0)) || { say "FAIL: $host_failures checks on our side failed"; exit 1; }
say "OK: Linux $(cat "$CACHE_DIR/kernel-release") and tlshd speak NVMe/TCP over TLS 1.3 with ours ($((SECONDS - start)) s)"
