#!/bin/sh
# Guest half of tests/vm/auth-selftest.sh (busybox sh, in the trixie guest:
# Linux 6.12, nvme-cli 2.13). NVMe in-band authentication (DH-HMAC-CHAP)
# between Linux's own NVMe/TCP host and target in one guest, over 127.0.0.1,
# so no NIC or network peer is needed:
#   1. target: a 64 MiB memory-backed null_blk exported by nvmet-tcp on
#      127.0.0.1:$PORT as $SUBNQN, attr_allow_any_host=0, one allowed host
#      (the guest's /etc/nvme/hostnqn) whose configfs entry has a dhchap_key
#      (nvme gen-dhchap-key), dhchap_hash hmac(sha256), dhchap_dhgroup ffdhe2048
#   2. unidirectional: connect with that secret, the namespace appears and
#      data written to it reads back; a wrong secret and no secret both fail
#      and leave no controller
#   3. bidirectional: the host entry also gets a dhchap_ctrl_key; connect with
#      both secrets works; a wrong controller secret fails (the host rejects
#      the controller)
# Every step prints the nvme-cli output and the kernel lines it caused.
# Environment: SUBNQN, PORT (default 4420), DHGROUP (default ffdhe2048),
# HASH (default hmac(sha256)).
. /test/lib.sh

SUBNQN=${SUBNQN:-nqn.2024-01.org.nvme-ddp:auth-selftest}
PORT=${PORT:-4420}
DHGROUP=${DHGROUP:-ffdhe2048}
HASH=${HASH:-hmac(sha256)}
ADDR=127.0.0.1
# /init wrote these; nvme-cli takes the host ID from /etc/nvme/hostid.
HOSTNQN=$(cat /etc/nvme/hostnqn)

# Kernel lines since the last dmesg_mark, indented.
dmesg_mark() { _dm=$(dmesg | wc -l); }
dmesg_new() { dmesg | tail -n +$((_dm + 1)) | sed 's/^/    dmesg: /'; }

# The only NVMe controllers / namespaces in this guest are the ones we connect.
ctrls() { ls /sys/class/nvme 2>/dev/null; }
wait_ns() {
	_i=0
	while [ $_i -lt 100 ]; do
		_ns=$(ls /sys/block | grep -E '^nvme[0-9]+n[0-9]+$' | head -n1)
		[ -n "$_ns" ] && wait_for "/dev/$_ns" && { echo "/dev/$_ns"; return 0; }
		sleep 0.1
		_i=$((_i + 1))
	done
	return 1
}

# connect_ok WHAT ARGS...: nvme connect ARGS must succeed, the namespace
# appear and take a write that reads back; then disconnect.
connect_ok() {
	_what=$1
	shift
	log "$_what: expect success"
	dmesg_mark
	_t0=$(cut -d' ' -f1 /proc/uptime)
	run nvme connect -t tcp -a $ADDR -s "$PORT" -n "$SUBNQN" --hostnqn "$HOSTNQN" "$@" ||
		{ dmesg_new; fail "$_what: nvme connect failed"; }
	ns=$(wait_ns) || { dmesg_new; fail "$_what: no namespace after connect"; }
	log "$_what: connected (started at ${_t0}s), namespace $ns"
	_c=$(ctrls | head -n1)
	echo "    /sys/class/nvme/$_c: transport=$(cat /sys/class/nvme/$_c/transport)" \
		"subsysnqn=$(cat /sys/class/nvme/$_c/subsysnqn) state=$(cat /sys/class/nvme/$_c/state)"
	run nvme list || fail "$_what: nvme list"
	dd if=/dev/urandom of=/tmp/pattern bs=4096 count=256 2>/dev/null
	dd if=/tmp/pattern of="$ns" bs=4096 conv=fsync 2>/dev/null || fail "$_what: write to $ns"
	echo 3 >/proc/sys/vm/drop_caches
	dd if="$ns" of=/tmp/readback bs=4096 count=256 2>/dev/null || fail "$_what: read from $ns"
	cmp /tmp/pattern /tmp/readback || fail "$_what: data read back differs"
	echo "    1 MiB written to $ns and read back intact"
	run nvme disconnect -n "$SUBNQN" || fail "$_what: nvme disconnect"
	dmesg_new
	[ -z "$(ctrls)" ] || fail "$_what: controller left after disconnect: $(ctrls)"
}

# connect_fails WHAT ARGS...: nvme connect ARGS must fail and leave no controller.
connect_fails() {
	_what=$1
	shift
	log "$_what: expect failure"
	dmesg_mark
	if run nvme connect -t tcp -a $ADDR -s "$PORT" -n "$SUBNQN" --hostnqn "$HOSTNQN" "$@"; then
		dmesg_new
		nvme disconnect -n "$SUBNQN" >/dev/null 2>&1
		fail "$_what: nvme connect succeeded"
	fi
	echo "    (nvme connect failed as it should)"
	sleep 0.5
	dmesg_new
	[ -z "$(ctrls)" ] || fail "$_what: controller left after the failed connect: $(ctrls)"
}

modprobe nvme-tcp || fail "modprobe nvme-tcp" # nvme-cli does not load it (udev would)
log "kernel $(uname -r); $(nvme version | tr '\n' ' ')"
log "host NQN $HOSTNQN"

# Keys: 32 random bytes each. --hmac 1 marks a key to be transformed with
# HMAC-SHA-256 over its owner's NQN before use (the host key with the host
# NQN, the controller key with the subsystem NQN; both kernels do that, so
# the NQN given here only feeds nvme-cli's own checks).
HOSTKEY=$(nvme gen-dhchap-key --key-length=32 --hmac=1 --nqn="$HOSTNQN") || fail "gen-dhchap-key"
CTRLKEY=$(nvme gen-dhchap-key --key-length=32 --hmac=1 --nqn="$SUBNQN") || fail "gen-dhchap-key"
BADKEY=$(nvme gen-dhchap-key --key-length=32 --hmac=1 --nqn="$HOSTNQN") || fail "gen-dhchap-key"
echo "    host key:       $HOSTKEY"
echo "    ctrl key:       $CTRLKEY"
echo "    wrong key:      $BADKEY"
run nvme check-dhchap-key --key="$HOSTKEY" || fail "check-dhchap-key"

dev=$(nullb_create nullb0 64) || fail "null_blk setup"
nvmet_subsys "$SUBNQN" || fail "nvmet subsystem"
nvmet_ns "$SUBNQN" 1 "$dev" || fail "nvmet namespace"
nvmet_host "$HOSTNQN" "$HOSTKEY" "" "$HASH" "$DHGROUP" || fail "nvmet host $HOSTNQN"
nvmet_allow_host "$SUBNQN" "$HOSTNQN" || fail "nvmet allowed_hosts"
nvmet_port 1 $ADDR "$PORT" tcp || fail "nvmet tcp port"
nvmet_link 1 "$SUBNQN" || fail "nvmet port link"
log "target: $SUBNQN ns 1 = $dev on tcp $ADDR:$PORT, allow_any_host=$(cat $NVMET/subsystems/$SUBNQN/attr_allow_any_host)"
for a in dhchap_key dhchap_ctrl_key dhchap_hash dhchap_dhgroup; do
	echo "    hosts/$HOSTNQN/$a = $(cat "$NVMET/hosts/$HOSTNQN/$a")"
done
echo "    subsystems/$SUBNQN/allowed_hosts: $(ls "$NVMET/subsystems/$SUBNQN/allowed_hosts")"

connect_ok "unidirectional" --dhchap-secret="$HOSTKEY"
connect_fails "wrong host secret" --dhchap-secret="$BADKEY"
connect_fails "no secret"

nvmet_host "$HOSTNQN" "$HOSTKEY" "$CTRLKEY" "$HASH" "$DHGROUP" || fail "nvmet host ctrl key"
echo "    hosts/$HOSTNQN/dhchap_ctrl_key = $(cat "$NVMET/hosts/$HOSTNQN/dhchap_ctrl_key")"
connect_ok "bidirectional" --dhchap-secret="$HOSTKEY" --dhchap-ctrl-secret="$CTRLKEY"
connect_fails "wrong controller secret" --dhchap-secret="$HOSTKEY" --dhchap-ctrl-secret="$BADKEY"

nvmet_teardown || fail "teardown"
log "auth selftest guest part OK"
