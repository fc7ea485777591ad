#!/bin/sh
# Guest half of tests/vm/selftest.sh (runs inside the VM under busybox sh).
#
# 1. exports a 64 MiB memory-backed null_blk through the kernel NVMe/TCP target
#    (nvmet + nvmet-tcp) on $GUEST_ADDR:4420 and prints GUEST-TARGET-READY
# 2. inside the guest: nvme discover, nvme connect (header+data digest, so the
#    crc32c modules are exercised), nvme list, a short fio write+verify run on
#    the connected namespace, nvme disconnect
# 3. waits (up to $SIGNAL_TIMEOUT s) for the host to connect to port $SIGNAL_PORT,
#    which it does after probing the target from outside, then tears down
. /test/lib.sh

NQN=${NQN:-nqn.2024-01.org.nvme-ddp:selftest}
PORT=${PORT:-4420}
SIGNAL_PORT=${SIGNAL_PORT:-7777}
SIGNAL_TIMEOUT=${SIGNAL_TIMEOUT:-120}
[ -n "$GUEST_ADDR" ] || fail "no guest address (run-guest.sh --ip)"

dev=$(nullb_create nullb0 64) || fail "null_blk setup"
nvmet_subsys "$NQN" || fail "nvmet subsystem"
nvmet_ns "$NQN" 1 "$dev" || fail "nvmet namespace"
nvmet_port 1 "$GUEST_ADDR" "$PORT" tcp || fail "nvmet tcp port"
nvmet_link 1 "$NQN" || fail "nvmet port link"
log "target: $NQN ns 1 = $dev on tcp $GUEST_ADDR:$PORT"
echo "GUEST-TARGET-READY"

# nvme-cli does not load the host side itself (udev/systemd would, normally).
modprobe nvme-tcp || fail "modprobe nvme-tcp"
run nvme discover -t tcp -a "$GUEST_ADDR" -s "$PORT" || fail "nvme discover"
run nvme connect -t tcp -a "$GUEST_ADDR" -s "$PORT" -n "$NQN" --hdr-digest --data-digest ||
	fail "nvme connect"
# The only NVMe block device in this guest is the one just connected.
i=0
ns=
while [ -z "$ns" ] && [ $i -lt 100 ]; do
	ns=$(ls /sys/block | grep -E '^nvme[0-9]+n[0-9]+$' | head -n1)
	[ -n "$ns" ] || { sleep 0.1; i=$((i + 1)); }
done
[ -n "$ns" ] && wait_for "/dev/$ns" || fail "no namespace block device after connect"
ns=/dev/$ns
run nvme list || fail "nvme list"
run fio --name=selftest --filename="$ns" --ioengine=libaio --direct=1 \
	--rw=randwrite --bs=4k --iodepth=16 --size=16M --verify=crc32c \
	--do_verify=1 --verify_fatal=1 --group_reporting --eta=never || fail "fio verify"
run nvme disconnect -n "$NQN" || fail "nvme disconnect"

log "waiting for the host on port $SIGNAL_PORT"
msg=$(wait_signal "$SIGNAL_PORT" "$SIGNAL_TIMEOUT") || fail "no signal from the host"
log "host said: $msg"
nvmet_teardown || fail "teardown"
log "selftest guest part OK"
