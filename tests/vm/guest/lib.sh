# tests/vm/guest/lib.sh - helpers for guest test scripts (busybox sh).
#
# run-guest.sh copies this file to /test/lib.sh in every guest; use it with
#   . /test/lib.sh
#
# Kernel NVMe target (nvmet) through configfs:
#   nullb_create NAME SIZE_MB [BLOCK_SIZE]   memory-backed null_blk, prints /dev/NAME
#   loop_create SIZE_MB                      loop device on a tmpfs file, prints /dev/loopN
#   nvmet_subsys NQN                         subsystem that allows any host
#   nvmet_ns NQN NSID DEVICE                 add and enable a namespace
#   nvmet_port PORTID TRADDR TRSVCID [TRTYPE] [ADRFAM]   (defaults tcp ipv4)
#   nvmet_link PORTID NQN                    expose subsystem NQN on port PORTID
#   nvmet_host HOSTNQN KEY [CTRL_KEY [HASH [DHGROUP]]]   host entry with DH-HMAC-CHAP
#                                            secrets (DHHC-1:..., from nvme gen-dhchap-key;
#                                            CTRL_KEY "" = unidirectional), HASH default
#                                            hmac(sha256), DHGROUP default null (no DH);
#                                            needs a kernel with NVME_TARGET_AUTH (trixie guest)
#   nvmet_allow_host NQN HOSTNQN             only hosts linked here may connect to NQN
#   nvmet_teardown                           remove all ports, subsystems, hosts, null_blk devices
# Misc:
#   log MSG...            message with guest uptime
#   fail MSG...           print "FAIL: MSG" and exit 1
#   run CMD...            print "+ CMD" then run it, returning its status
#   wait_for PATH [SECS]  wait until PATH exists (default 10 s)
#   wait_signal PORT [SECS]  wait for one TCP connection on PORT (busybox nc),
#                         print what the peer sent; used to hand control to the host

NVMET=/sys/kernel/config/nvmet
NULLB=/sys/kernel/config/nullb

log() { echo "[guest $(cut -d' ' -f1 /proc/uptime)] $*"; }
fail() { echo "FAIL: $*"; exit 1; }
run() { echo "+ $*"; "$@"; }

wait_for() {
	_i=0 _n=$(( ${2:-10} * 10 ))
	while [ ! -e "$1" ]; do
		[ $_i -ge $_n ] && return 1
		sleep 0.1
		_i=$((_i + 1))
	done
}

nullb_create() {
	[ -d $NULLB ] || modprobe null_blk nr_devices=0 || return 1
	mkdir "$NULLB/$1" || return 1
	echo "$2" >"$NULLB/$1/size"
	echo 1 >"$NULLB/$1/memory_backed"
	echo "${3:-512}" >"$NULLB/$1/blocksize"
	echo 1 >"$NULLB/$1/power" || return 1
	# Older kernels name the disk nullb<index> rather than after the directory.
	_dev=/dev/$1
	[ -e "$_dev" ] || [ ! -f "$NULLB/$1/index" ] || _dev=/dev/nullb$(cat "$NULLB/$1/index")
	wait_for "$_dev" || return 1
	echo "$_dev"
}

loop_create() {
	modprobe loop 2>/dev/null
	mkdir -p /run/loopfiles
	_f=$(mktemp /run/loopfiles/img.XXXXXX)
	truncate -s "${1}M" "$_f" || return 1
	losetup -f "$_f" || return 1
	losetup -a | grep "$_f" | cut -d: -f1
}

nvmet_subsys() {
	modprobe nvmet || return 1
	mkdir "$NVMET/subsystems/$1" || return 1
	echo 1 >"$NVMET/subsystems/$1/attr_allow_any_host"
}

nvmet_ns() {
	_ns=$NVMET/subsystems/$1/namespaces/$2
	mkdir "$_ns" || return 1
	echo "$3" >"$_ns/device_path"
	echo 1 >"$_ns/enable"
}

nvmet_port() {
	_trtype=${4:-tcp}
	modprobe "nvmet-$_trtype" || return 1
	_p=$NVMET/ports/$1
	mkdir "$_p" || return 1
	echo "$_trtype" >"$_p/addr_trtype"
	echo "${5:-ipv4}" >"$_p/addr_adrfam"
	echo "$2" >"$_p/addr_traddr"
	echo "$3" >"$_p/addr_trsvcid"
}

nvmet_link() {
	ln -s "$NVMET/subsystems/$2" "$NVMET/ports/$1/subsystems/$2"
}

# Re-running it on an existing host replaces the keys (a key of "" for
# CTRL_KEY leaves the controller key as it was); they are read at the next
# connect.
nvmet_host() {
	modprobe nvmet || return 1
	_h=$NVMET/hosts/$1
	[ -d "$_h" ] || mkdir "$_h" || return 1
	echo "$2" >"$_h/dhchap_key" || return 1
	[ -z "$3" ] || echo "$3" >"$_h/dhchap_ctrl_key" || return 1
	echo "${4:-hmac(sha256)}" >"$_h/dhchap_hash" || return 1
	echo "${5:-null}" >"$_h/dhchap_dhgroup"
}

# nvmet refuses allowed_hosts links while attr_allow_any_host is 1.
nvmet_allow_host() {
	echo 0 >"$NVMET/subsystems/$1/attr_allow_any_host" || return 1
	ln -s "$NVMET/hosts/$2" "$NVMET/subsystems/$1/allowed_hosts/$2"
}

nvmet_teardown() {
	[ -d $NVMET ] || return 0
	for _l in "$NVMET"/ports/*/subsystems/*; do [ -L "$_l" ] && rm "$_l"; done
	for _p in "$NVMET"/ports/*; do [ -d "$_p" ] && rmdir "$_p"; done
	for _s in "$NVMET"/subsystems/*; do
		[ -d "$_s" ] || continue
		for _l in "$_s"/allowed_hosts/*; do [ -L "$_l" ] && rm "$_l"; done
		for _ns in "$_s"/namespaces/*; do
			[ -d "$_ns" ] || continue
			echo 0 >"$_ns/enable"
			rmdir "$_ns"
		done
		rmdir "$_s"
	done
	for _h in "$NVMET"/hosts/*; do [ -d "$_h" ] && rmdir "$_h"; done
	for _d in "$NULLB"/*; do
		[ -f "$_d/power" ] || continue
		echo 0 >"$_d/power"
		rmdir "$_d"
	done
	return 0
}

wait_signal() {
	timeout "${2:-60}" nc -l -p "$1"
}
