#!/bin/bash
# run-guest.sh --script FILE [options]
#
# Boots the test guest built by build-guest.sh under qemu (software emulation),
# runs FILE inside it and returns FILE's exit status.
#
# How the script gets in and the result gets out: FILE (plus tests/vm/guest/lib.sh,
# an env file and any --file) is packed into a small per-run cpio that is
# appended to the cached initramfs; the guest's /init runs /test/script.sh
# (under busybox sh) and prints "GUEST-EXIT <code>" on the serial console,
# which qemu writes to a file. This script waits for that marker (or the
# timeout), prints the script's output (the console lines between
# GUEST-SCRIPT-BEGIN and GUEST-EXIT) on stdout and exits with <code>.
#
# Options:
#   --suite NAME       guest flavour, as build-guest.sh --suite: bookworm (default,
#                      Debian 12, 6.1) or trixie (Debian 13, 6.12: NVMe in-band
#                      authentication, nvme-cli 2.13, keyutils, tlshd)
#   --cache DIR        guest cache (default $NVME_DDP_VM_CACHE or /var/cache/nvme-ddp-vm,
#                      with -trixie appended for trixie); built with
#                      build-guest.sh --suite NAME if it is missing
#   --netns NS         network namespace to run qemu in (must exist) ...
#   --tap TAP          ... and the TAP device in it the virtio-net NIC is attached to
#   --ip ADDR/PREFIX   guest address for eth0 (e.g. 198.18.0.10/24)
#   --script FILE      script to run in the guest (busybox sh; bash is not available)
#   --file SRC[:NAME]  extra file for the guest, as /test/NAME (repeatable)
#   --env NAME=VALUE   exported to the script (repeatable); GUEST_IP/GUEST_ADDR are always set
#   --timeout SECS     give up after SECS (default 300); exit status 124
#   --log FILE         keep the full serial console log in FILE (default: temporary,
#                      kept and reported only on failure)
#   --smp N            guest CPUs (default 2), --mem MB (default 1024)
#   --append ARGS      extra kernel command line (e.g. guest.dmesg=1)
#   --verbose          stream the console to stderr while the guest runs
#
# Without --netns/--tap the guest has no NIC. Networking is only ever a TAP in a
# namespace the caller created; there is no user-mode (slirp) networking.
#
# Exit status: the guest script's status; 124 timeout; 125 guest/qemu failed
# without reporting a status; 77 cannot run here (not root, no qemu, no guest).
set -euo pipefail

HERE=$(dirname "$(readlink -f "$0")")
SUITE=bookworm CACHE_DIR=''
NETNS='' TAP='' GUEST_IP='' SCRIPT='' TIMEOUT=300 LOG='' SMP=2 MEM=1024 APPEND='' VERBOSE=0
FILES=() ENVS=()

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2; exit 2; }
die() { echo "run-guest: error: $*" >&2; exit 125; }
skip() { echo "run-guest: skipping: $*" >&2; exit 77; }

while (($#)); do
	case $1 in
	--suite) SUITE=$2; shift ;;
	--cache) CACHE_DIR=$2; shift ;;
	--netns) NETNS=$2; shift ;;
	--tap) TAP=$2; shift ;;
	--ip) GUEST_IP=$2; shift ;;
	--script) SCRIPT=$2; shift ;;
	--file) FILES+=("$2"); shift ;;
	--env) ENVS+=("$2"); shift ;;
	--timeout) TIMEOUT=$2; shift ;;
	--log) LOG=$2; shift ;;
	--smp) SMP=$2; shift ;;
	--mem) MEM=$2; shift ;;
	--append) APPEND=$2; shift ;;
	--verbose) VERBOSE=1 ;;
	-h | --help) usage ;;
	*) echo "run-guest: unknown option $1" >&2; usage ;;
	esac
	shift
done
[[ -n $SCRIPT ]] || usage
[[ -r $SCRIPT ]] || die "cannot read script $SCRIPT"
[[ -n $NETNS && -n $TAP ]] || [[ -z $NETNS && -z $TAP ]] || die "--netns and --tap go together"
[[ $TIMEOUT =~ ^[0-9]+$ ]] || die "--timeout wants seconds"
# The same default cache directories as build-guest.sh.
case $SUITE in
bookworm) CACHE_DIR=${CACHE_DIR:-${NVME_DDP_VM_CACHE:-/var/cache/nvme-ddp-vm}} ;;
trixie) CACHE_DIR=${CACHE_DIR:-${NVME_DDP_VM_CACHE:-/var/cache/nvme-ddp-vm}-trixie} ;;
*) die "unknown --suite $SUITE (bookworm or trixie)" ;;
esac

command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not installed"
if [[ -n $NETNS ]]; then
	((EUID == 0)) || skip "not root (needed for ip netns exec)"
	ip netns list | awk '{print $1}' | grep -qxF -- "$NETNS" || die "network namespace $NETNS does not exist"
	ip -n "$NETNS" link show dev "$TAP" >/dev/null 2>&1 || die "no device $TAP in namespace $NETNS"
fi

if [[ ! -s $CACHE_DIR/vmlinuz || ! -s $CACHE_DIR/initramfs.cpio.gz || ! -x $CACHE_DIR/busybox ]]; then
	rc=0
	"$HERE/build-guest.sh" --suite "$SUITE" "$CACHE_DIR" || rc=$?
	((rc == 0)) || { ((rc == 77)) && exit 77; die "building the guest failed"; }
fi
BUSYBOX=$CACHE_DIR/busybox

# Acceleration: TCG unless a real KVM module is loaded. (/dev/kvm alone is not
# enough: on some hosts it is a paravirtual device the Debian kernel hangs under.)
if grep -qE '^kvm_(intel|amd) ' /proc/modules 2>/dev/null; then
	ACCEL=(-accel kvm -cpu host)
else
	ACCEL=(-accel "tcg,thread=multi" -cpu max)
fi

TMP=$(mktemp -d /tmp/nvme-ddp-vm.XXXXXX)
QEMU_PID='' TAIL_PID=''
cleanup() {
	[[ -n $TAIL_PID ]] && kill "$TAIL_PID" 2>/dev/null
	[[ -n $QEMU_PID ]] && kill "$QEMU_PID" 2>/dev/null && wait "$QEMU_PID" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- per-run cpio with /test ------------------------------------------------
mkdir -p "$TMP/run/test"
install -m 0755 "$SCRIPT" "$TMP/run/test/script.sh"
[[ -f $HERE/guest/lib.sh ]] && install -m 0644 "$HERE/guest/lib.sh" "$TMP/run/test/lib.sh"
for f in "${FILES[@]}"; do
	src=${f%%:*} name=$(basename "$f")
	[[ $f == *:* ]] && name=${f#*:}
	[[ -r $src ]] || die "cannot read --file $src"
	mkdir -p "$TMP/run/test/$(dirname "$name")"
	cp -L "$src" "$TMP/run/test/$name"
done
squote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
{
	echo "export GUEST_IP=$(squote "$GUEST_IP") GUEST_ADDR=$(squote "${GUEST_IP%%/*}")"
	for e in "${ENVS[@]}"; do
		[[ $e == *=* && ${e%%=*} =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "bad --env $e"
		echo "export ${e%%=*}=$(squote "${e#*=}")"
	done
} >"$TMP/run/test/env"
(cd "$TMP/run" && find . -mindepth 1 | LC_ALL=C sort | "$BUSYBOX" cpio -o -H newc 2>/dev/null) |
	gzip -1 >"$TMP/run.cpio.gz"
# The kernel unpacks concatenated (individually compressed) cpio archives in order.
cat "$CACHE_DIR/initramfs.cpio.gz" "$TMP/run.cpio.gz" >"$TMP/initrd"

# --- qemu -----------------------------------------------------------------------
CONSOLE=${LOG:-$TMP/console.log}
: >"$CONSOLE"
cmdline="console=ttyS0 panic=-1 quiet"
[[ -n $GUEST_IP ]] && cmdline+=" ip=$GUEST_IP"
[[ -n $APPEND ]] && cmdline+=" $APPEND"

QEMU=(qemu-system-x86_64 "${ACCEL[@]}" -smp "$SMP" -m "$MEM"
	-nographic -nodefaults -no-reboot -monitor none
	-serial "file:$CONSOLE"
	-kernel "$CACHE_DIR/vmlinuz" -initrd "$TMP/initrd" -append "$cmdline")
if [[ -n $NETNS ]]; then
	# Stable, locally administered MAC derived from the guest address.
	last=${GUEST_IP%%/*}
	last=${last##*.}
	[[ $last =~ ^[0-9]+$ ]] || last=10
	mac=$(printf '52:54:00:c6:12:%02x' "$((last & 255))")
	QEMU+=(-netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no"
		-device "virtio-net-pci,netdev=n0,mac=$mac,romfile=")
	QEMU=(ip netns exec "$NETNS" "${QEMU[@]}")
fi

start=$SECONDS
"${QEMU[@]}" </dev/null >"$TMP/qemu.out" 2>&1 &
QEMU_PID=$!
if ((VERBOSE)); then
	tail -n +1 -f "$CONSOLE" >&2 &
	TAIL_PID=$!
fi

status=
while :; do
	if grep -aq '^GUEST-EXIT [0-9]' "$CONSOLE"; then
		status=$(grep -a '^GUEST-EXIT [0-9]' "$CONSOLE" | tail -n1 | awk '{print $2}' | tr -d '\r')
		break
	fi
	kill -0 "$QEMU_PID" 2>/dev/null || break
	if ((SECONDS - start >= TIMEOUT)); then
		status=timeout
		break
	fi
	sleep 0.5
done

# Give the guest a moment to power off by itself, then make sure qemu is gone.
if [[ $status != timeout ]]; then
	for _ in $(seq 20); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.25; done
fi
kill "$QEMU_PID" 2>/dev/null || true
qemu_rc=0
wait "$QEMU_PID" 2>/dev/null || qemu_rc=$?
QEMU_PID=
sleep 0.2
if [[ -n $TAIL_PID ]]; then kill "$TAIL_PID" 2>/dev/null || true; TAIL_PID=; fi

# Script output: console lines between the markers, without the serial CRs.
# (The init prints an empty line before the GUEST-EXIT marker; drop it.)
tr -d '\r' <"$CONSOLE" | sed -n '/GUEST-SCRIPT-BEGIN/,/^GUEST-EXIT /{/GUEST-SCRIPT-BEGIN/d;/^GUEST-EXIT /d;p}' |
	sed '${/^$/d}'

# On failure keep the console log and say where it is; unless the script ran to
# completion (its output is on stdout already) also show how the console ended.
report_failure() {
	local keep=$CONSOLE
	if [[ -z $LOG ]]; then
		keep=$(mktemp /tmp/nvme-ddp-vm-console.XXXXXX.log)
		cp "$CONSOLE" "$keep"
	fi
	{
		echo "run-guest: $1; console log: $keep"
		[[ ${2:-} == brief ]] && return
		if [[ -s $TMP/qemu.out ]]; then
			echo "--- qemu output ---"
			cat "$TMP/qemu.out"
		fi
		echo "--- last 30 console lines ---"
		tr -d '\r' <"$CONSOLE" | tail -n 30
	} >&2
}

case $status in
timeout)
	report_failure "timeout after ${TIMEOUT}s"
	exit 124
	;;
"")
	report_failure "qemu exited (status $qemu_rc) without a GUEST-EXIT marker after $((SECONDS - start))s"
	exit 125
	;;
*)
	((status == 0)) || report_failure "guest script exited with $status" brief
	exit "$status"
	;;
esac
