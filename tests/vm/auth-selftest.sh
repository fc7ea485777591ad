#!/bin/bash
# auth-selftest.sh [-v] [CACHE_DIR]
#
# Self-test of the trixie guest (build-guest.sh --suite trixie: Linux 6.12,
# nvme-cli 2.13) for NVMe in-band authentication (DH-HMAC-CHAP): boots it
# with no NIC running guest/auth-selftest-guest.sh, in which the kernel's
# NVMe/TCP host connects to the kernel's own target (nvmet-tcp on 127.0.0.1,
# a null_blk namespace, only one allowed host) with hmac(sha256) and
# ffdhe2048: unidirectional and bidirectional authentication must succeed and
# carry I/O, a wrong host secret, no secret and a wrong controller secret
# must each fail. No network namespace is needed: nothing leaves the guest.
#
# Quiet on success (one summary line); -v also prints the guest's output
# (nvme-cli output and the kernel lines of every step).
# CACHE_DIR defaults to build-guest.sh's for trixie
# (/var/cache/nvme-ddp-vm-trixie, or $NVME_DDP_VM_CACHE-trixie).
# Exit status: 0 pass, 1 fail, 77 skipped (no qemu, cannot build the guest).
set -euo pipefail

HERE=$(dirname "$(readlink -f "$0")")
VERBOSE=0
if [[ ${1:-} == -v ]]; then VERBOSE=1; shift; fi
CACHE_DIR=${1:-${NVME_DDP_VM_CACHE:-/var/cache/nvme-ddp-vm}-trixie}
TIMEOUT=${SELFTEST_TIMEOUT:-300}

skip() { echo "auth-selftest: skipping: $*" >&2; exit 77; }
fail() { echo "auth-selftest: FAIL: $*" >&2; exit 1; }

command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not installed"

start=$SECONDS
TMP=$(mktemp -d /tmp/nvme-ddp-auth-selftest.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# Build first (a minute the first time), so it does not eat the guest timeout.
rc=0
"$HERE/build-guest.sh" --suite trixie "$CACHE_DIR" || rc=$?
((rc == 0)) || { ((rc == 77)) && exit 77; fail "build-guest.sh --suite trixie failed ($rc)"; }

guest_rc=0
"$HERE/run-guest.sh" --suite trixie --cache "$CACHE_DIR" --timeout "$TIMEOUT" \
	--script "$HERE/guest/auth-selftest-guest.sh" --log "$TMP/console.log" \
	>"$TMP/guest.out" 2>"$TMP/guest.err" || guest_rc=$?
((guest_rc == 77)) && skip "$(tail -n1 "$TMP/guest.err")"
if ((VERBOSE)) || ((guest_rc != 0)); then
	cat "$TMP/guest.out"
	cat "$TMP/guest.err" >&2
fi
((guest_rc == 0)) || fail "guest script failed ($guest_rc)"
boot=$(grep -a -o 'GUEST-SCRIPT-BEGIN uptime=[0-9.]*' "$TMP/console.log" | cut -d= -f2)
end=$(grep -a -o 'GUEST-EXIT [0-9]* uptime=[0-9.]*' "$TMP/console.log" | cut -d= -f2)
echo "auth-selftest: OK (guest kernel $(cat "$CACHE_DIR/kernel-release")," \
	"$(grep -a -o 'nvme version [^ ]*' "$TMP/guest.out" | head -n1)," \
	"init after ${boot}s guest uptime, script done at ${end}s, total $((SECONDS - start))s)"
