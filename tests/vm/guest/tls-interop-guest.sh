#!/bin/sh
# Guest half of tests/vm/tls-interop.sh (busybox sh, in the trixie guest:
# Linux 6.12, nvme-cli 2.13 / libnvme 1.13, ktls-utils 1.0.0's tlshd).
# NVMe/TCP over TLS 1.3 with a PSK between Linux and our binary:
#
# 0. tlshd (the kernel's TLS handshake agent, GnuTLS) runs in the
#    background with a config of its own (debug level 1: it names the PSK
#    identity it uses; keyrings=.nvme, which 1.0.0 links into its session
#    keyring anyway), its log in /tmp/tlshd.log; the lines each case makes
#    are printed with the case, and held to what the case expects.
# 1. The Linux host against our controllers (the host script started them
#    with the configured PSK $TLS_KEY and --tls-compat, nvme-cli 2.13's
#    derivation): the TLS PSK goes into the .nvme keyring with `nvme
#    check-tls-key --insert` (identity v0, and v1 with --identity=1) or is
#    left to `nvme connect --tls-key=KEY`; `nvme connect --tls` must show the
#    namespace, take an 8 MiB fio write that verifies, use the key that was
#    inserted (sysfs tls_key), and tlshd must log its handshakes as
#    successful. A key derived from another configured PSK and a host in
#    the clear must be refused with no controller or namespace left, the
#    kernel and tlshd logging only what each refusal explains. Our
#    controller with --tls optional also admits a host in the clear, and
#    its discovery log says TREQ not required, TSAS TLS 1.3.
# 2. Linux nvmet for our host: a null_blk exported by nvmet-tcp on
#    $GUEST_ADDR:$PORT as $TARGET_NQN on a port with addr_tsas tls1.3 and
#    addr_treq required, the TLS PSKs of our host NQNs in .nvme ($OH0 with
#    identity v0, $OH1 with v1). GUEST-TARGET-READY says it is up; the host
#    then runs its cases and, after each, sends "check KIND WHAT" to
#    $SIGNAL_PORT: the kernel and tlshd lines since the previous check are
#    held to KIND and GUEST-CHECKED N (N counts the checks) lets the host go
#    on; "done ..." ends it.
#
# Every verdict is a line starting with "ok" or "FAIL"; a failed case does
# not stop the others, the script exits 1 at the end if any failed.
. /test/lib.sh

NQN=${NQN:?}
TARGET_NQN=${TARGET_NQN:?}
TLS_KEY=${TLS_KEY:?}
WRONG_KEY=${WRONG_KEY:?}
PORT=${PORT:-4420}
SIGNAL_PORT=${SIGNAL_PORT:-7777}
[ -n "$GUEST_ADDR" ] || fail "no guest address"

FAILS=0
ok() { echo "ok   $*"; }
bad() {
	echo "FAIL $*"
	FAILS=$((FAILS + 1))
	return 1
}
now() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
indent() { sed 's/^/    /'; }
oneline() { sed 's/^\[[^]]*\] //' | paste -sd';'; }

# Kernel lines of NVMe, the TLS ULP and the handshake upcall that say
# something went wrong.
complaints() {
	grep -iE 'nvme|tls|handshake' |
		grep -iE 'error|fail|invalid|timeout|reset|reconnect|unexpected|bad|warn|mismatch|unhandled|refus|reject|not allowed|no key|no valid|denied|fatal|unknown' || true
}
# Kernel lines since the last call (and forget them).
klog() { dmesg -c 2>/dev/null | grep -iE 'nvme|tls|handshake' || true; }
klog_between() {
	_c=$(klog | complaints)
	[ -z "$_c" ] || bad "kernel complaints $1: $(echo "$_c" | tr '\n' ';')"
}

# tlshd: its log since the last call, in $TL (and forget it).
TLSHD_LOG=/tmp/tlshd.log
tlshd_off=0
tlshd_take() {
	_sz=$(wc -c <"$TLSHD_LOG")
	TL=$(tail -c +$((tlshd_off + 1)) "$TLSHD_LOG" | head -c $((_sz - tlshd_off)))
	tlshd_off=$_sz
}
# What tlshd logs when something failed (its handshake or a key), less
# what every handshake logs: the path of GnuTLS's system config, and
# (were a peer's address not in /etc/hosts) getnameinfo's failure.
tlshd_complaints() {
	echo "$1" | grep -iE 'fail|error|gnutls|alert' |
		grep -vE 'System config file: |Temporary failure in name resolution' || true
}
tlshd_alive() {
	kill -0 "$TLSHD_PID" 2>/dev/null || bad "tlshd is gone: $(tail -n 5 "$TLSHD_LOG" | tr '\n' ';')"
}

# The namespaces and controllers of the Linux host: only those this
# script connects.
nvme_disks() { ls /sys/block | grep -E '^nvme[0-9]+n[0-9]+$' || true; }
nvme_ctrls() { ls /sys/class/nvme 2>/dev/null || true; }
namespace_dev() {
	_i=0
	while [ $_i -lt 100 ]; do
		_ns=$(nvme_disks | head -n1)
		[ -n "$_ns" ] && [ -e "/dev/$_ns" ] && { echo "/dev/$_ns"; return 0; }
		sleep 0.1
		_i=$((_i + 1))
	done
	return 1
}
cleanup_host() {
	nvme disconnect-all >/dev/null 2>&1
	klog >/dev/null
}

# insert_key HOSTNQN SUBNQN KEY [check-tls-key options]: the TLS PSK
# derived for HOSTNQN and SUBNQN into .nvme (nvme-cli 2.13: identity v0
# unless --identity=1); prints the key's serial as sysfs shows it.
insert_key() {
	_out=$(nvme check-tls-key --insert --hostnqn "$1" --subsysnqn "$2" --keydata "$3" ${4:+"$4"} 2>&1) ||
		{ echo "$_out" >&2; return 1; }
	echo "$_out" | sed -n 's/^Inserted TLS key \([0-9a-f]*\)$/\1/p'
}
# identity HOSTNQN SUBNQN KEY [options]: the identity check-tls-key derives.
identity() {
	nvme check-tls-key --hostnqn "$1" --subsysnqn "$2" --keydata "$3" ${4:+"$4"} 2>&1
}

# connect_ok WHAT ADDR:PORT HOSTNQN SERIAL ARGS...: the Linux host connects
# to our controller as HOSTNQN (its UUID as host ID) with ARGS; the
# namespace must take an 8 MiB fio write that verifies; with TLS (SERIAL
# not "clear") the controller's sysfs tls_key must be SERIAL (any key when
# SERIAL is "any") and tlshd must log only successful handshakes, in the
# clear it must have no tls_key and tlshd nothing; the kernel nothing of
# complaints.
connect_ok() {
	_what=$1 _addr=${2%:*} _port=${2##*:} _hostnqn=$3 _serial=$4
	shift 4
	klog_between "before $_what"
	tlshd_take
	_t0=$(now)
	_out=$(nvme connect -t tcp -a "$_addr" -s "$_port" -n "$NQN" --hostnqn "$_hostnqn" \
		--hostid "${_hostnqn##*:uuid:}" "$@" 2>&1) || {
		echo "$_out" | indent
		klog | indent
		tlshd_take
		echo "$TL" | indent
		cleanup_host
		bad "$_what: nvme connect failed"
		return 1
	}
	_took=$(since "$_t0")
	_dev=$(namespace_dev) || { klog | indent; cleanup_host; bad "$_what: no namespace after connect"; return 1; }
	_ctrl=$(nvme_ctrls | head -n1)
	_key=$(cat "/sys/class/nvme/$_ctrl/tls_key" 2>/dev/null || echo none)
	_fio=$(fio --name=tls --filename="$_dev" --ioengine=libaio --direct=1 --rw=randwrite --bs=4k \
		--iodepth=16 --size=8M --verify=crc32c --do_verify=1 --verify_fatal=1 --eta=never 2>&1) || {
		echo "$_fio" | indent
		klog | indent
		cleanup_host
		bad "$_what: fio verify on $_dev"
		return 1
	}
	_bw=$(echo "$_fio" | grep -oE 'WRITE: bw=[^ ]+' | head -n1)
	_out=$(nvme disconnect -n "$NQN" 2>&1) || { echo "$_out" | indent; cleanup_host; bad "$_what: nvme disconnect"; return 1; }
	_i=0
	while [ -e "$_dev" ] && [ $_i -lt 50 ]; do sleep 0.1; _i=$((_i + 1)); done
	sleep 0.3
	_log=$(klog)
	tlshd_take
	echo "$_log" | indent
	echo "$TL" | sed 's/^/    tlshd: /'
	_c=$(echo "$_log" | complaints)
	[ -z "$_c" ] || { bad "$_what: the kernel complained: $(echo "$_c" | tr '\n' ';')"; return 1; }
	[ -z "$(nvme_ctrls)" ] || { cleanup_host; bad "$_what: a controller is left after disconnect"; return 1; }
	_hs=$(echo "$TL" | grep -c 'was successful' || true)
	_tc=$(tlshd_complaints "$TL")
	if [ "$_serial" = clear ]; then
		[ "$_key" = none ] || { bad "$_what: tls_key $_key on a connection in the clear"; return 1; }
		[ -z "$TL" ] || { bad "$_what: tlshd was asked for a handshake in the clear"; return 1; }
		ok "$_what: nvme connect took ${_took}s -> $_dev, fio 8 MiB randwrite verified ($_bw); in the clear, no tlshd"
		return 0
	fi
	[ "$_key" != none ] || { bad "$_what: the controller has no tls_key: not TLS"; return 1; }
	[ "$_serial" = any ] || [ "$_key" = "$_serial" ] || { bad "$_what: tls_key $_key, not the inserted key $_serial"; return 1; }
	[ -z "$_tc" ] || { bad "$_what: tlshd complained: $(echo "$_tc" | tr '\n' ';')"; return 1; }
	[ "$_hs" -ge 2 ] || { bad "$_what: tlshd logged $_hs successful handshakes (admin and I/O queues)"; return 1; }
	_id=$(echo "$TL" | sed -n 's/.*Using psk identity \(.*\)$/\1/p' | sort -u | paste -sd'|')
	echo "$_id" | grep -qE "^NVMe[01]R01 $_hostnqn $NQN( [A-Za-z0-9+/]{43}=)?\$" ||
		{ bad "$_what: tlshd offered identity '$_id'"; return 1; }
	ok "$_what: nvme connect took ${_took}s -> $_dev, fio 8 MiB randwrite verified ($_bw);" \
		"tls_key $_key, tlshd: $_hs successful handshakes, identity ${_id:-?}"
}

# connect_fails WHAT ADDR:PORT HOSTNQN WANT ALLOW TLSHD ARGS...: nvme
# connect must fail and leave no controller and no namespace; the kernel
# must log WANT ("" for nothing in particular), and every complaint among
# the lines the attempt caused must match ALLOW (both grep -E); tlshd's
# complaints must match TLSHD, and one at least ("" for no line at all: no
# handshake was asked for).
connect_fails() {
	_what=$1 _addr=${2%:*} _port=${2##*:} _hostnqn=$3 _want=$4 _allow=$5 _tlshd=$6
	shift 6
	klog_between "before $_what"
	tlshd_take
	if _out=$(nvme connect -t tcp -a "$_addr" -s "$_port" -n "$NQN" --hostnqn "$_hostnqn" \
		--hostid "${_hostnqn##*:uuid:}" "$@" 2>&1); then
		echo "$_out" | indent
		cleanup_host
		bad "$_what: nvme connect succeeded"
		return 1
	fi
	# The kernel may still be tearing the failed controller down.
	_i=0
	while [ -n "$(nvme_ctrls)" ] && [ $_i -lt 50 ]; do sleep 0.1; _i=$((_i + 1)); done
	sleep 0.3
	_log=$(klog)
	tlshd_take
	echo "    nvme connect: $(echo "$_out" | tr '\n' ' ')"
	echo "$_log" | indent
	echo "$TL" | sed 's/^/    tlshd: /'
	_c=$(echo "$_log" | complaints)
	_other=$(echo "$_c" | grep -vE "$_allow" || true)
	[ -z "$_other" ] || { cleanup_host; bad "$_what: unexpected kernel complaints: $(echo "$_other" | tr '\n' ';')"; return 1; }
	[ -z "$_want" ] || echo "$_log" | grep -qE "$_want" || { bad "$_what: the kernel did not log /$_want/"; return 1; }
	[ -z "$(nvme_ctrls)" ] || { cleanup_host; bad "$_what: a controller is left: $(nvme_ctrls)"; return 1; }
	[ -z "$(nvme_disks)" ] || { cleanup_host; bad "$_what: a namespace is visible: $(nvme_disks)"; return 1; }
	if [ -z "$_tlshd" ]; then
		[ -z "$TL" ] || { bad "$_what: tlshd was asked for a handshake: $(echo "$TL" | tr '\n' ';')"; return 1; }
	else
		_other=$(tlshd_complaints "$TL" | grep -vE "$_tlshd" || true)
		[ -z "$_other" ] || { bad "$_what: unexpected tlshd complaints: $(echo "$_other" | tr '\n' ';')"; return 1; }
		echo "$TL" | grep -qE "$_tlshd" || { bad "$_what: tlshd did not log /$_tlshd/"; return 1; }
	fi
	ok "$_what: refused (nvme connect: $(echo "$_out" | tail -n1));" \
		"kernel: $(echo "$_c" | oneline); tlshd: $(tlshd_complaints "$TL" | sed 's/^tlshd\[[0-9]*\]: //' | sort -u | paste -sd';')"
}

# --- 0. tlshd ----------------------------------------------------------------
# tlshd names each peer (getnameinfo): the guest has no resolver.
printf '%s\tbridge\n%s\tsmoltcp-controller\n%s\tsmoltcp-host\n%s\tguest\n' \
	"${CTRL_TCP%:*}" "${CTRL_SMOLTCP%:*}" "${SMOL_HOST_IP:?}" "$GUEST_ADDR" >>/etc/hosts

# .nvme (nvme-keyring) must exist before tlshd starts, which links it into
# its session keyring, and before nvmet creates a port (the port's keyring).
for m in nvme-keyring tls nvme-tcp; do modprobe "$m" || fail "modprobe $m"; done
[ -n "$(grep -E ' keyring +\.nvme: ' /proc/keys)" ] || fail "no .nvme keyring"
klog >/dev/null
ok "kernel $(uname -r), $(nvme version | head -n1), $(tlshd -v 2>&1 | head -n1 | sed 's/,.*//'), $(keyctl --version 2>&1 | head -n1)"

cat >/tmp/tlshd.conf <<-EOF
	[debug]
	loglevel=1
	tls=0
	nl=0

	[authenticate]
	keyrings=.nvme
EOF
: >"$TLSHD_LOG"
tlshd -s -c /tmp/tlshd.conf >>"$TLSHD_LOG" 2>&1 &
TLSHD_PID=$!
sleep 1
tlshd_alive || fail "tlshd did not start"
tlshd_take
echo "$TL" | sed 's/^/    tlshd: /'
echo "$TL" | grep -q "Keyring '.nvme' linked into our session keyring" ||
	bad "tlshd did not link .nvme into its session keyring"
ok "tlshd running (pid $TLSHD_PID), .nvme linked into its session keyring"

# nvme-cli takes the host script's configured PSKs and derives the
# identities our controller expects (nvme-cli 2.13: the derivation our
# --tls-compat follows).
for k in "$TLS_KEY" "$WRONG_KEY"; do
	out=$(nvme check-tls-key --hostnqn "$LH0" --subsysnqn "$NQN" --keydata "$k" 2>&1) ||
		{ echo "$out"; fail "nvme check-tls-key rejects $k"; }
done
id0=$(identity "$LH0" "$NQN" "$TLS_KEY")
[ "$id0" = "NVMe0R01 $LH0 $NQN" ] || bad "identity v0 from check-tls-key: '$id0'"
id1=$(identity "$LH1" "$NQN" "$TLS_KEY" --identity=1)
echo "$id1" | grep -qE "^NVMe1R01 $LH1 $NQN [A-Za-z0-9+/]{43}=\$" || bad "identity v1 from check-tls-key: '$id1'"
ok "nvme check-tls-key takes both configured PSKs; identities: '$id0', '$id1'"

# --- 1. the Linux host against our controllers ----------------------------------
A=$CTRL_TCP
S0=$(insert_key "$LH0" "$NQN" "$TLS_KEY") && [ -n "$S0" ] || fail "inserting the v0 key of $LH0"
S1=$(insert_key "$LH1" "$NQN" "$TLS_KEY" --identity=1) && [ -n "$S1" ] || fail "inserting the v1 key of $LH1"
SW=$(insert_key "$LHW" "$NQN" "$WRONG_KEY") && [ -n "$SW" ] || fail "inserting the wrong key of $LHW"
# The smoltcp controller's subsystem has the same NQN: the same keys.
ok "TLS PSKs in .nvme: $LH0 v0 ($S0), $LH1 v1 ($S1), $LHW v0 from another configured PSK ($SW)"
grep ' psk ' /proc/keys | indent

connect_ok "Linux host -> our kernel-TCP controller: identity v0 (check-tls-key --insert)" "$A" "$LH0" "$S0" --tls
connect_ok "Linux host -> our kernel-TCP controller: identity v0, header and data digests" "$A" "$LH0" "$S0" \
	--tls --hdr-digest --data-digest
connect_ok "Linux host -> our kernel-TCP controller: identity v1 (check-tls-key --insert --identity=1)" "$A" "$LH1" "$S1" --tls
# libnvme 1.13 derives and inserts the key itself (identity v1) and passes
# its serial.
connect_ok "Linux host -> our kernel-TCP controller: nvme connect --tls-key=KEY (libnvme inserts identity v1)" \
	"$A" "$LH2" any --tls --tls-key="$TLS_KEY"
connect_ok "Linux host -> our smoltcp controller: identity v0" "$CTRL_SMOLTCP" "$LH0" "$S0" --tls
connect_ok "Linux host -> our smoltcp controller: identity v1, data digest" "$CTRL_SMOLTCP" "$LH1" "$S1" --tls --data-digest

# A PSK the controller cannot derive: our controller refuses the binder
# with a fatal alert (GnuTLS: -12, GNUTLS_E_FATAL_ALERT_RECEIVED), tlshd
# reports EACCES and the host gives up on queue 0.
TLS_FAILED='queue 0: TLS handshake complete, error -13$'
TLSHD_FAILED="unhandled error -12, returning EACCES|Handshake with '[^']*' \\([0-9.]+\\) failed"
connect_fails "Linux host -> our kernel-TCP controller: TLS PSK from another configured PSK" "$A" "$LHW" \
	"$TLS_FAILED" "$TLS_FAILED" "$TLSHD_FAILED" --tls
connect_fails "Linux host -> our smoltcp controller: TLS PSK from another configured PSK" "$CTRL_SMOLTCP" "$LHW" \
	"$TLS_FAILED" "$TLS_FAILED" "$TLSHD_FAILED" --tls
# In the clear on a port that requires TLS: our controller closes the
# connection at the ICReq; tlshd is not involved.
CLEAR_REFUSED='nvme_tcp: queue 0: failed to receive icresp, error -104$'
connect_fails "Linux host -> our kernel-TCP controller: in the clear on the TLS-required port" "$A" "$LH0" \
	"$CLEAR_REFUSED" "$CLEAR_REFUSED" ''
# The port with TLS optional: in the clear and over TLS.
connect_ok "Linux host -> our kernel-TCP controller, TLS optional: in the clear" "$CTRL_OPTIONAL" "$LH0" clear
connect_ok "Linux host -> our kernel-TCP controller, TLS optional: identity v0" "$CTRL_OPTIONAL" "$LH0" "$S0" --tls
# Its discovery log (in the clear): TREQ secure channel not required,
# TSAS TLS 1.3.
klog_between "before discovery"
disc=$(nvme discover -t tcp -a "${CTRL_OPTIONAL%:*}" -s "${CTRL_OPTIONAL##*:}" --hostnqn "$LH0" \
	--hostid "${LH0##*:uuid:}" 2>&1) || { echo "$disc" | indent; bad "nvme discover on the optional port"; }
entry=$(echo "$disc" | awk -v nqn="$NQN" '/^=====Discovery Log Entry/ { if (hit) exit; e = "" }
	{ e = e $0 "\n" } $1 == "subnqn:" && $2 == nqn { hit = 1 } END { if (hit) printf "%s", e }')
echo "$entry" | indent
treq=$(echo "$entry" | sed -n 's/^treq: *//p')
sectype=$(echo "$entry" | sed -n 's/^sectype: *//p')
case $treq in
"not required"*) [ "$sectype" = tls13 ] && ok "nvme discover on the optional port: treq '$treq', sectype '$sectype'" ||
	bad "nvme discover on the optional port: sectype '$sectype'" ;;
*) bad "nvme discover on the optional port: treq '$treq', sectype '$sectype'" ;;
esac
cleanup_host
klog_between "after discovery"
tlshd_alive

# --- 2. Linux nvmet for our host -------------------------------------------------
dev=$(nullb_create nullb0 64) || fail "null_blk"
nvmet_subsys "$TARGET_NQN" || fail "nvmet subsystem"
nvmet_ns "$TARGET_NQN" 1 "$dev" || fail "nvmet namespace"
T0=$(insert_key "$OH0" "$TARGET_NQN" "$TLS_KEY") && [ -n "$T0" ] || fail "inserting the v0 key of $OH0"
T1=$(insert_key "$OH1" "$TARGET_NQN" "$TLS_KEY" --identity=1) && [ -n "$T1" ] || fail "inserting the v1 key of $OH1"
nvmet_port 1 "$GUEST_ADDR" "$PORT" tcp || fail "nvmet port"
P=$NVMET/ports/1
echo tls1.3 >"$P/addr_tsas" || fail "addr_tsas tls1.3"
echo required >"$P/addr_treq" || fail "addr_treq required"
nvmet_link 1 "$TARGET_NQN" || fail "nvmet link"
ok "nvmet: $TARGET_NQN ns 1 = $dev on tcp $GUEST_ADDR:$PORT, addr_tsas $(cat "$P/addr_tsas"), addr_treq $(cat "$P/addr_treq");" \
	"TLS PSKs: $OH0 v0 ($T0), $OH1 v1 ($T1)"
klog_between "after nvmet's setup"
tlshd_take
echo "GUEST-TARGET-READY"

n=0
while :; do
	msg=$(wait_signal "$SIGNAL_PORT" "${SIGNAL_TIMEOUT:-900}") || { bad "no word from the host"; break; }
	case $msg in
	check\ *)
		set -- $msg
		kind=$2
		shift 2
		what="nvmet: after $*"
		log=$(klog)
		tlshd_take
		echo "$log" | indent
		echo "$TL" | sed 's/^/    tlshd: /'
		c=$(echo "$log" | complaints)
		tc=$(tlshd_complaints "$TL")
		hs=$(echo "$TL" | grep -c 'was successful' || true)
		# What each kind must show (WANT among the kernel lines, TWANT
		# among tlshd's) and may show (every kernel complaint must match
		# ALLOW, every tlshd one TALLOW).
		# tlshd's server fails a handshake with EACCES and sends no
		# alert (ktls-utils 1.0.0 sends none); nvmet then shuts the
		# connection down, logging nothing.
		failed="Handshake with '[^']*' \\([0-9.]+\\) failed\$"
		case $kind in
		clean)
			want='nvmet: creating nvm controller' allow='^$'
			twant='was successful' tallow='^$'
			;;
		wrong-psk)
			# The binder does not verify: GnuTLS's
			# GNUTLS_E_RECEIVED_ILLEGAL_PARAMETER (-55).
			want='' allow='^$'
			twant='unhandled error -55, returning EACCES'
			tallow="$twant|$failed"
			;;
		no-key)
			# No key in .nvme for the identity offered.
			want='' allow='^$'
			twant="failed to search 'psk' key 'NVMe1R01 $OH0 $TARGET_NQN "
			tallow="$twant|unhandled error -31, returning EACCES|$failed"
			;;
		clear)
			# nvmet hands the connection to tlshd all the same (TLS
			# required: no peek at the first PDU); GnuTLS finds no
			# ClientHello in the ICReq: GNUTLS_E_UNEXPECTED_PACKET (-15).
			want='' allow='^$'
			twant='unhandled error -15, returning EACCES'
			tallow="$twant|$failed"
			;;
		*)
			want='^$' allow='^$' twant='^$' tallow='^$'
			bad "$what: unknown kind $kind"
			;;
		esac
		other=$(echo "$c" | grep -vE "$allow" || true)
		tother=$(echo "$tc" | grep -vE "$tallow" || true)
		if [ -n "$other" ]; then
			bad "$what: unexpected kernel complaints: $(echo "$other" | tr '\n' ';')"
		elif [ -n "$tother" ]; then
			bad "$what: unexpected tlshd complaints: $(echo "$tother" | tr '\n' ';')"
		elif [ -n "$want" ] && ! echo "$log" | grep -qE "$want"; then
			bad "$what: the kernel did not log /$want/"
		elif ! echo "$TL" | grep -qE "$twant"; then
			bad "$what: tlshd did not log /$twant/"
		else
			_id=$(echo "$TL" | sed -n 's/.*Using psk identity \(.*\)$/\1/p' | sort -u | paste -sd'|')
			ok "$what: kernel: $( [ -n "$c" ] && echo "$c" | oneline || echo "no complaint, $(echo "$log" | grep -c 'creating nvm controller') controllers");" \
				"tlshd: $hs successful handshakes$( [ -n "$tc" ] && echo ", $(echo "$tc" | sed 's/^tlshd\[[0-9]*\]: //' | sort -u | paste -sd';')")${_id:+, identity $_id}"
		fi
		n=$((n + 1))
		echo "GUEST-CHECKED $n"
		;;
	done*)
		echo "host: $msg"
		[ "$msg" = done ] || bad "the host reported: $msg"
		break
		;;
	*) bad "unexpected word from the host: $msg" ;;
	esac
done
tlshd_alive
nvmet_teardown || bad "nvmet teardown"
kill "$TLSHD_PID" 2>/dev/null
[ $FAILS -eq 0 ] || { echo "--- tlshd log ---"; cat "$TLSHD_LOG"; fail "$FAILS checks failed"; }
ok "guest done"
