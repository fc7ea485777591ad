#!/bin/sh
# Guest half of tests/vm/auth-interop.sh (busybox sh, in the trixie guest:
# Linux 6.12, nvme-cli 2.13). NVMe in-band authentication (DH-HMAC-CHAP) and
# host allow-lists between Linux and our binary, over NVMe/TCP:
#
# 1. The Linux host against our controllers (the host script started them
#    with the secrets passed here in the environment), after the kernel's
#    DH groups have been through their self-tests: each case is one
#    `nvme connect --hostnqn ... --dhchap-secret ... [--dhchap-ctrl-secret
#    ...]`. A case that must succeed must show the namespace, take an 8 MiB
#    fio write that verifies, disconnect, and leave the kernel log with the
#    hash and group it expects ("qid 0: authenticated with hash hmac(shaN)
#    dhgroup G", and "qid 0: controller authenticated" when bidirectional)
#    and no complaint. A case that must fail must fail, leave no controller
#    and no namespace, the kernel must log the line that says why, and its
#    lines may hold only the complaints that case is expected to cause
#    (each case names them narrowly). Kernel lines that come between cases
#    may hold no complaint.
# 2. Linux nvmet for our host: a null_blk exported by nvmet-tcp on
#    $GUEST_ADDR:$PORT as $TARGET_NQN with attr_allow_any_host=0 and three
#    allowed hosts, each with its own secrets, hash and group; a fourth
#    host has an entry with a secret but is not linked under allowed_hosts.
#    GUEST-TARGET-READY says it is up. The host then runs its cases and,
#    after each group of them, sends "check KIND WHAT" to $SIGNAL_PORT: the
#    kernel lines since the previous check are held to KIND (clean: no
#    complaint at all; the negative kinds: the line that says what
#    happened, and no complaint but their own expected lines) and
#    GUEST-CHECKED N (N counts the checks) tells the host to go on.
#    "done ..." ends it.
#
# Every verdict is a line starting with "ok" or "FAIL"; a failed case does
# not stop the others (the host's part still runs), the script exits 1 at
# the end if any failed.
. /test/lib.sh

NQN=${NQN:?}
TARGET_NQN=${TARGET_NQN:?}
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

# NVMe kernel lines that say something went wrong. Besides interop.sh's
# words, those of authentication and admission ("host response mismatch",
# "unhandled state", "no key", "not allowed", "fatal error occurred").
complaints() {
	grep -iE 'nvme' | grep -iE 'error|fail|invalid|timeout|reset|reconnect|unexpected|bad|warn|mismatch|unhandled|refus|reject|not allowed|no key|denied|fatal' || true
}
# Kernel lines since the last call (and forget them).
klog() { dmesg -c 2>/dev/null | grep -iE 'nvme' || true; }
indent() { sed 's/^/    /'; }
# Kernel lines logged between cases (a late teardown) must not complain.
klog_between() {
	_c=$(klog | complaints)
	[ -z "$_c" ] || bad "kernel complaints $1: $(echo "$_c" | tr '\n' ';')"
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

# connect_ok WHAT ADDR:PORT HOSTNQN EXPECT ARGS...: the Linux host connects
# to our controller as HOSTNQN (its UUID as host ID) with ARGS; the kernel
# must log EXPECT (a grep -E pattern) and nothing of complaints.
connect_ok() {
	_what=$1 _addr=${2%:*} _port=${2##*:} _hostnqn=$3 _want=$4
	shift 4
	klog_between "before $_what"
	_t0=$(now)
	_out=$(nvme connect -t tcp -a "$_addr" -s "$_port" -n "$NQN" --hostnqn "$_hostnqn" \
		--hostid "${_hostnqn##*:uuid:}" "$@" 2>&1) || {
		echo "$_out" | indent
		klog | indent
		cleanup_host
		bad "$_what: nvme connect failed"
		return 1
	}
	_took=$(since "$_t0")
	_dev=$(namespace_dev) || { klog | indent; cleanup_host; bad "$_what: no namespace after connect"; return 1; }
	_fio=$(fio --name=auth --filename="$_dev" --ioengine=libaio --direct=1 --rw=randwrite --bs=4k \
		--iodepth=16 --size=8M --verify=crc32c --do_verify=1 --verify_fatal=1 --eta=never 2>&1) || {
		echo "$_fio" | indent
		klog | indent
		cleanup_host
		bad "$_what: fio verify on $_dev"
		return 1
	}
	_out=$(nvme disconnect -n "$NQN" 2>&1) || { echo "$_out" | indent; cleanup_host; bad "$_what: nvme disconnect"; return 1; }
	_i=0
	while [ -e "$_dev" ] && [ $_i -lt 50 ]; do sleep 0.1; _i=$((_i + 1)); done
	_log=$(klog)
	echo "$_log" | indent
	_c=$(echo "$_log" | complaints)
	[ -z "$_c" ] || { bad "$_what: the kernel complained: $(echo "$_c" | tr '\n' ';')"; return 1; }
	echo "$_log" | grep -qE "$_want" || { bad "$_what: the kernel did not log /$_want/"; return 1; }
	[ -z "$(nvme_ctrls)" ] || { cleanup_host; bad "$_what: a controller is left after disconnect"; return 1; }
	ok "$_what: nvme connect took ${_took}s -> $_dev, fio 8 MiB randwrite verified;" \
		"kernel: $(echo "$_log" | grep -oE 'qid 0: (authenticated with .*|controller authenticated)' | paste -sd';')"
}

# connect_fails WHAT ADDR:PORT HOSTNQN WANT ALLOW ARGS...: nvme connect must
# fail and leave no controller and no namespace; the kernel must log WANT,
# and every complaint among the lines the attempt caused must match ALLOW
# (both grep -E).
connect_fails() {
	_what=$1 _addr=${2%:*} _port=${2##*:} _hostnqn=$3 _want=$4 _allow=$5
	shift 5
	klog_between "before $_what"
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
	sleep 0.2
	_log=$(klog)
	echo "    nvme connect: $(echo "$_out" | tr '\n' ' ')"
	echo "$_log" | indent
	_c=$(echo "$_log" | complaints)
	_other=$(echo "$_c" | grep -vE "$_allow" || true)
	[ -z "$_other" ] || { cleanup_host; bad "$_what: unexpected kernel complaints: $(echo "$_other" | tr '\n' ';')"; return 1; }
	echo "$_log" | grep -qE "$_want" || { bad "$_what: the kernel did not log /$_want/"; return 1; }
	[ -z "$(nvme_ctrls)" ] || { cleanup_host; bad "$_what: a controller is left: $(nvme_ctrls)"; return 1; }
	[ -z "$(nvme_disks)" ] || { cleanup_host; bad "$_what: a namespace is visible: $(nvme_disks)"; return 1; }
	ok "$_what: refused (nvme connect: $(echo "$_out" | tail -n1)); kernel: $(echo "$_c" | sed 's/^\[[^]]*\] //' | paste -sd';')"
}

modprobe nvme-tcp || fail "modprobe nvme-tcp" # nvme-cli does not load it (udev would)
klog >/dev/null
ok "kernel $(uname -r), $(nvme version | head -n1)"

# The secrets come from the host script (random bytes, CRC-32, base64, as
# nvme gen-dhchap-key makes them); nvme-cli must take each one.
for k in "$LH1_KEY" "$LH1_CTRL" "$LH2_KEY" "$LH2_CTRL" "$LH3_KEY" "$LH3_CTRL" "$WRONG_KEY" \
	"$OH1_KEY" "$OH1_CTRL" "$OH2_KEY" "$OH2_CTRL" "$OH3_KEY" "$OHX_KEY"; do
	out=$(nvme check-dhchap-key --key="$k" 2>&1) || { echo "$out"; fail "nvme check-dhchap-key rejects $k"; }
done
ok "nvme check-dhchap-key takes the host script's 13 secrets (hh 01, 02, 03)"

# --- 1. the Linux host against our controllers ------------------------------------
# The kernel tests each ffdhe group's implementation (the crypto manager's
# self-test) the first time the group is used. Under TCG that takes
# seconds for the big groups (ffdhe8192 about 10 s), during which the
# Linux host sends nothing: not its reply, not a keep alive (KATO 5 s).
# Our controller starts keep alive only once the admin queue has
# authenticated (the connect timeout bounds the wait before), so such a
# connect must pass: ffdhe8192 is left untested here, and its first use is
# the Linux host's connect below. The others are tested now, so that each
# case times authentication, not the self-test.
modprobe nvmet || fail "modprobe nvmet"
mkdir "$NVMET/hosts/warm-up" || fail "nvmet warm-up host"
warm=
for g in ffdhe2048 ffdhe3072 ffdhe4096 ffdhe6144; do
	t0=$(now)
	echo "$g" >"$NVMET/hosts/warm-up/dhchap_dhgroup" || fail "nvmet knows no $g"
	warm="$warm $g $(since "$t0")s"
done
rmdir "$NVMET/hosts/warm-up"
ok "the kernel's DH groups tested on first use (crypto self-test):$warm"

# What Linux logs when it is refused. Our controller answers a wrong host
# response with AUTH_Failure1 (the host logs its rejection, EKEYREJECTED),
# and a host it does not admit with Connect Invalid Host (0x4184 with DNR:
# "ret=16772"); the Linux host answers a wrong controller response with
# AUTH_Failure2 and gives up; with no secret it gives up before it sends
# anything (ENOKEY, which nvme-cli misreports as a missing TLS key).
WRONG_SECRET_LINES='qid 0: authentication failed, error -129$|failed to connect queue: 0 ret=-129$'
A=$CTRL_2048
connect_ok "Linux host -> our kernel-TCP controller (ffdhe2048): unidirectional, hh 01 secret" \
	"$A" "$LH1" 'qid 0: authenticated with hash hmac\(sha256\) dhgroup ffdhe2048' \
	--dhchap-secret="$LH1_KEY"
connect_ok "Linux host -> our kernel-TCP controller (ffdhe2048): bidirectional, hh 01/03 secrets" \
	"$A" "$LH1" 'qid 0: controller authenticated' \
	--dhchap-secret="$LH1_KEY" --dhchap-ctrl-secret="$LH1_CTRL"
connect_ok "Linux host -> our kernel-TCP controller (ffdhe2048): bidirectional, hh 02/01 secrets (from a file on our side)" \
	"$A" "$LH2" 'qid 0: controller authenticated' \
	--dhchap-secret="$LH2_KEY" --dhchap-ctrl-secret="$LH2_CTRL"
connect_fails "Linux host -> our kernel-TCP controller: wrong host secret" "$A" "$LH1" \
	'qid 0: authentication failed, error -129' "$WRONG_SECRET_LINES" \
	--dhchap-secret="$WRONG_KEY"
connect_fails "Linux host -> our kernel-TCP controller: wrong controller secret" "$A" "$LH1" \
	'qid 0: controller authentication failed' "qid 0: controller authentication failed\$|$WRONG_SECRET_LINES" \
	--dhchap-secret="$LH1_KEY" --dhchap-ctrl-secret="$WRONG_KEY"
connect_fails "Linux host -> our kernel-TCP controller: no secret" "$A" "$LH1" \
	'qid 0: no key' 'qid 0: no key$|qid 0: authentication setup failed$|failed to connect queue: 0 ret=-126$'
connect_fails "Linux host -> our kernel-TCP controller: host not on the allow-list" "$A" "$LHX" \
	"Connect for subsystem $NQN is not allowed, hostnqn: $LHX" \
	"Connect for subsystem $NQN is not allowed, hostnqn: $LHX\$|failed to connect queue: 0 ret=16772\$" \
	--dhchap-secret="$WRONG_KEY"
connect_ok "Linux host -> our kernel-TCP controller (sha512, ffdhe8192): bidirectional, hh 03/02 secrets" \
	"$CTRL_8192" "$LH3" 'qid 0: authenticated with hash hmac\(sha512\) dhgroup ffdhe8192' \
	--dhchap-secret="$LH3_KEY" --dhchap-ctrl-secret="$LH3_CTRL"
connect_ok "Linux host -> our smoltcp controller (sha384, ffdhe3072): bidirectional, hh 01/03 secrets" \
	"$CTRL_SMOLTCP" "$LH1" 'qid 0: authenticated with hash hmac\(sha384\) dhgroup ffdhe3072' \
	--dhchap-secret="$LH1_KEY" --dhchap-ctrl-secret="$LH1_CTRL"
connect_fails "Linux host -> our smoltcp controller: wrong host secret" "$CTRL_SMOLTCP" "$LH1" \
	'qid 0: authentication failed, error -129' "$WRONG_SECRET_LINES" \
	--dhchap-secret="$WRONG_KEY"
cleanup_host

# --- 2. Linux nvmet for our host ---------------------------------------------------
dev=$(nullb_create nullb0 64) || fail "null_blk"
nvmet_subsys "$TARGET_NQN" || fail "nvmet subsystem"
nvmet_ns "$TARGET_NQN" 1 "$dev" || fail "nvmet namespace"
nvmet_host "$OH1" "$OH1_KEY" "$OH1_CTRL" "hmac(sha256)" ffdhe2048 || fail "nvmet host OH1"
nvmet_host "$OH2" "$OH2_KEY" "$OH2_CTRL" "hmac(sha512)" ffdhe8192 || fail "nvmet host OH2"
nvmet_host "$OH3" "$OH3_KEY" "" "hmac(sha384)" null || fail "nvmet host OH3"
nvmet_host "$OHX" "$OHX_KEY" "" "hmac(sha256)" ffdhe2048 || fail "nvmet host OHX"
for h in "$OH1" "$OH2" "$OH3"; do
	nvmet_allow_host "$TARGET_NQN" "$h" || fail "nvmet allowed_hosts $h"
done
nvmet_port 1 "$GUEST_ADDR" "$PORT" tcp || fail "nvmet port"
nvmet_link 1 "$TARGET_NQN" || fail "nvmet link"
ok "nvmet: $TARGET_NQN ns 1 = $dev on tcp $GUEST_ADDR:$PORT, attr_allow_any_host=$(cat "$NVMET/subsystems/$TARGET_NQN/attr_allow_any_host"), allowed: $(ls "$NVMET/subsystems/$TARGET_NQN/allowed_hosts" | wc -l) hosts"
klog_between "after the last case and nvmet's setup"
echo "GUEST-TARGET-READY"

n=0
while :; do
	msg=$(wait_signal "$SIGNAL_PORT" "${SIGNAL_TIMEOUT:-900}") || { bad "no word from the host"; break; }
	case $msg in
	check\ *)
		set -- $msg
		kind=$2
		shift 2
		what="nvmet: kernel log after $*"
		log=$(klog)
		echo "$log" | indent
		c=$(echo "$log" | complaints)
		# What nvmet logs for each (WANT must be among the lines, every
		# complaint must match ALLOW): a wrong host response is
		# "host response mismatch", Failure1 and the controller's end; our
		# host's AUTH_Failure2 (the controller's response was wrong) only
		# ends the controller; with no secret our host closes the queue
		# after Connect, and nvmet says nothing of it; a host it does not
		# allow is refused in Connect.
		# When authentication fails, nvmet closes the queue as it ends
		# the controller while our host, refused, closes its end: if the
		# two FINs cross, the socket goes to TCP_CLOSING (11), a state
		# nvmet_tcp_state_change() has no case for, and it warns
		# "queue N unhandled state 11". Linux's own host does the same to
		# it (auth-selftest.sh); it is let through in those two windows.
		ctrl='nvmet: ctrl [0-9]+'
		crossed='nvmet_tcp: queue [0-9]+ unhandled state 11$'
		case $kind in
		clean) want='with DH-HMAC-CHAP' allow='^$' ;;
		wrong-host-secret)
			want="$ctrl qid 0 host response mismatch"
			allow="$ctrl qid 0 host response mismatch\$|$ctrl qid 0 failure1 \\(1\\)\$|$ctrl fatal error occurred!\$|$crossed"
			;;
		wrong-ctrl-secret) want="$ctrl fatal error occurred!" allow="$ctrl fatal error occurred!\$|$crossed" ;;
		no-secret) want="for NQN $OH1 with DH-HMAC-CHAP" allow='^$' ;;
		not-allowed)
			want="nvmet: connect by host $OHX for subsystem $TARGET_NQN not allowed"
			allow="$want\$"
			;;
		*)
			want='^$' allow='^$'
			bad "$what: unknown kind $kind"
			;;
		esac
		other=$(echo "$c" | grep -vE "$allow" || true)
		if [ -n "$other" ]; then
			bad "$what: unexpected kernel complaints: $(echo "$other" | tr '\n' ';')"
		elif ! echo "$log" | grep -qE "$want"; then
			bad "$what: nvmet did not log /$want/"
		elif [ -z "$c" ]; then
			ok "$what: no complaint; $(echo "$log" | grep -c 'with DH-HMAC-CHAP') controllers created with DH-HMAC-CHAP"
		else
			ok "$what: only the expected lines: $(echo "$c" | sed 's/^\[[^]]*\] //' | paste -sd';')"
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
nvmet_teardown || bad "nvmet teardown"
[ $FAILS -eq 0 ] || fail "$FAILS checks failed"
ok "guest done"
