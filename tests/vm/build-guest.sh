#!/bin/bash
# build-guest.sh [--suite bookworm|trixie] [CACHE_DIR]
#
# Builds the Linux guest used by the NVMe/TCP interoperability tests:
#   CACHE_DIR/vmlinuz            Debian kernel (from linux-image-amd64's dependency)
#   CACHE_DIR/initramfs.cpio.gz  busybox, kmod, nvme-cli, fio, rdma (+ shared
#                                libraries), the NVMe/TCP and NVMe/RDMA host and
#                                target kernel modules, soft-iWARP (siw.ko, built
#                                here: Debian's kernel has CONFIG_RDMA_SIW unset)
#                                with dependencies and modules.dep/alias, so
#                                modprobe works, and /init (tests/vm/guest/init)
#   CACHE_DIR/busybox            static busybox, used on the host to pack per-run cpios
#   CACHE_DIR/kernel-release     e.g. 6.1.0-56-amd64
#   CACHE_DIR/manifest.txt       package versions and module list that went in
#   CACHE_DIR/guest.stamp        cache key
#
# Nothing is installed on the host: packages are fetched with `apt-get download`
# and unpacked with `dpkg-deb -x` into a scratch directory that is removed after.
# siw.ko is compiled from linux-source of the kernel's exact version against
# its unpacked linux-headers, with the host's gcc of the kernel's major version.
# The result is cached: if guest.stamp matches (same kernel package version, same
# build-guest.sh and guest/init), the script does nothing and prints nothing.
#
# Suites (--suite NAME; deliberately no environment variable, which would
# also reach scripts that pass the bookworm CACHE_DIR):
#   bookworm  (default) what the host's own apt sources and lists give: on this
#             Debian 12 machine the 6.1 kernel and nvme-cli 2.3, plus siw.ko.
#   trixie    Debian 13: the 6.12 kernel (NVMe in-band authentication,
#             DH-HMAC-CHAP, and NVMe/TCP TLS, in both host and target),
#             nvme-cli 2.13 with libnvme 1.13, keyutils (keyctl) and
#             ktls-utils (tlshd); no siw, which no test needs there. The
#             packages come through a private apt configuration in
#             CACHE_DIR/apt: a sources.list of its own ("deb MIRROR trixie
#             main", MIRROR $NVME_DDP_VM_MIRROR or http://deb.debian.org/debian,
#             the host's mirror), its own lists, package cache, empty dpkg status
#             and no apt.conf.d, so the host's apt sources and lists are neither
#             read nor written. Its lists are refreshed when they are more than
#             7 days old, or always with NVME_DDP_VM_APT_UPDATE=1.
#
# CACHE_DIR defaults to $NVME_DDP_VM_CACHE or /var/cache/nvme-ddp-vm, with
# "-trixie" appended for trixie.
# Exit status: 0 ok (built or cached), 77 cannot build here (skip), 1 error.
set -euo pipefail

HERE=$(dirname "$(readlink -f "$0")")
ARCH_TRIPLET=x86_64-linux-gnu

SUITE=bookworm
if [[ ${1:-} == --suite ]]; then
	[[ $# -ge 2 ]] || { echo "build-guest: --suite wants bookworm or trixie" >&2; exit 2; }
	SUITE=$2
	shift 2
fi
case $SUITE in
bookworm) CACHE_DIR=${1:-${NVME_DDP_VM_CACHE:-/var/cache/nvme-ddp-vm}} ;;
trixie) CACHE_DIR=${1:-${NVME_DDP_VM_CACHE:-/var/cache/nvme-ddp-vm}-trixie} ;;
*) echo "build-guest: unknown suite '$SUITE' (bookworm or trixie)" >&2; exit 2 ;;
esac

# Kernel modules to put in the initramfs (their dependencies are added
# automatically). Names that are built into the kernel are fine too.
MODULES=(
	configfs
	nvme-core nvme-fabrics nvme-tcp
	nvmet nvmet-tcp
	ib_core iw_cm rdma_cm siw nvme-rdma nvmet-rdma
	null_blk loop
	virtio_pci virtio_net e1000
	crc32c_generic crc32c-intel
)
# Userspace packages; shared libraries are followed through their Depends.
USER_PKGS=(busybox-static kmod nvme-cli fio iproute2)
BUILD_SIW=1 MERGED_USR=0
if [[ $SUITE == trixie ]]; then
	# The same, less siw (not built for 6.12), plus what NVMe in-band
	# authentication and, later, TLS need. nvme-auth is a module; the
	# DH-HMAC-CHAP crypto of Debian's 6.12 is built in (CONFIG_CRYPTO_HMAC,
	# _SHA256, _SHA512 (also sha384), _DH with _DH_RFC7919_GROUPS: the
	# ffdhe2048..8192 templates), listed to document it; the ssse3/avx
	# sha256/sha512 drivers are modules the kernel asks modprobe for
	# (crypto-sha256 ...) and prefers. nvme-keyring, tls and AES-GCM are
	# for NVMe/TCP TLS (tlshd).
	MODULES=(
		configfs
		nvme-core nvme-fabrics nvme-tcp
		nvmet nvmet-tcp
		ib_core iw_cm rdma_cm nvme-rdma nvmet-rdma
		null_blk loop
		virtio_pci virtio_net e1000
		crc32c_generic crc32c-intel
		nvme-auth nvme-keyring
		hmac sha256_generic sha512_generic dh_generic
		sha256-ssse3 sha512-ssse3
		tls gcm ghash-clmulni-intel aesni-intel
	)
	# liblzma5: kmod 34 dlopen()s it (no DT_NEEDED, so not followed) to
	# read 6.12's xz-compressed modules when depmod/modprobe run here.
	USER_PKGS+=(keyutils ktls-utils liblzma5)
	# Debian 13 packages put everything under /usr and rely on the merged-/usr
	# symlinks (/bin -> usr/bin, ...) that are not in any of these packages.
	BUILD_SIW=0 MERGED_USR=1
fi

die() { echo "build-guest: error: $*" >&2; exit 1; }
skip() { echo "build-guest: skipping: $*" >&2; exit 77; }
log() { echo "build-guest: $*" >&2; }

for tool in apt-get apt-cache dpkg-deb readelf gzip xz flock sha256sum make; do
	command -v "$tool" >/dev/null || skip "$tool not installed"
done

mkdir -p "$CACHE_DIR" 2>/dev/null || skip "cannot create $CACHE_DIR (not root?)"
[[ -w $CACHE_DIR ]] || skip "$CACHE_DIR not writable (not root?)"
CACHE_DIR=$(readlink -f "$CACHE_DIR")

# Serialise concurrent builds / users of the same cache.
exec 9>"$CACHE_DIR/.lock"
flock 9

# Options for every apt-get / apt-cache call: none, i.e. the host's own
# configuration, unless the suite has a private one (set up here).
APT=()
if [[ $SUITE != bookworm ]]; then
	APT_DIR=$CACHE_DIR/apt
	mkdir -p "$APT_DIR"/{lists/partial,cache/archives/partial,apt.conf.d,preferences.d}
	echo "deb ${NVME_DDP_VM_MIRROR:-http://deb.debian.org/debian} $SUITE main" >"$APT_DIR/sources.list"
	: >"$APT_DIR/status"
	# Read by apt before (and instead of) /etc/apt/apt.conf.d, which on the
	# host adds DEP-11 downloads and post-update hooks (appstreamcli refresh
	# of the host's catalogue). The signing keys stay the host's
	# (/etc/apt/trusted.gpg.d, from debian-archive-keyring, which has
	# trixie's). The empty status keeps the host's installed packages out
	# of the candidate versions.
	cat >"$APT_DIR/apt.conf" <<-EOF
		Dir::Etc::parts "$APT_DIR/apt.conf.d";
		Dir::Etc::preferences "$APT_DIR/preferences";
		Dir::Etc::preferencesparts "$APT_DIR/preferences.d";
		Acquire::Languages "none";
		Acquire::GzipIndexes "true";
	EOF
	export APT_CONFIG=$APT_DIR/apt.conf
	APT=(-o "Dir::Etc::sourcelist=$APT_DIR/sources.list" -o Dir::Etc::sourceparts=-
		-o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache=$APT_DIR/cache"
		-o "Dir::State::status=$APT_DIR/status")
	if [[ ${NVME_DDP_VM_APT_UPDATE:-0} == 1 || ! -e $APT_DIR/updated ]] ||
		[[ -n $(find "$APT_DIR/updated" -mtime +7) ]]; then
		# Offline: old lists (or, with none, an existing cache) still do.
		if apt-get "${APT[@]}" -q update >"$APT_DIR/update.log" 2>&1; then
			touch "$APT_DIR/updated"
		else
			log "warning: apt-get update for $SUITE failed (see $APT_DIR/update.log)"
		fi
	fi
fi

# ---------------------------------------------------------------------------
# Cache key: kernel package + version, plus the build recipe itself.
kpkg=$(apt-cache "${APT[@]}" depends linux-image-amd64 2>/dev/null |
	awk '/Depends: linux-image-[0-9]/ {print $2; exit}') || true
kver_pkg=
[[ -n $kpkg ]] && kver_pkg=$(apt-cache "${APT[@]}" show --no-all-versions "$kpkg" 2>/dev/null |
	awk '/^Version:/ {print $2; exit}')
outputs=(vmlinuz initramfs.cpio.gz busybox kernel-release guest.stamp)
have_outputs() {
	local f
	for f in "${outputs[@]}"; do [[ -s $CACHE_DIR/$f ]] || return 1; done
}
if [[ -z $kpkg || -z $kver_pkg ]]; then
	# No apt metadata (offline, lists not fetched): an existing cache is fine.
	have_outputs && exit 0
	[[ $SUITE == bookworm ]] || skip "cannot resolve linux-image-amd64 in $SUITE (see $APT_DIR/update.log)"
	skip "cannot resolve linux-image-amd64 with apt-cache (run apt-get update)"
fi
recipe_hash=$(cat "$HERE/build-guest.sh" "$HERE/guest/init" | sha256sum | cut -c1-16)
key="$kpkg $kver_pkg recipe=$recipe_hash"
[[ $SUITE == bookworm ]] || key+=" suite=$SUITE"
if have_outputs && [[ $(cat "$CACHE_DIR/guest.stamp") == "$key" ]]; then
	exit 0
fi

log "building guest ($kpkg $kver_pkg) in $CACHE_DIR"
started=$SECONDS

WORK=$(mktemp -d "$CACHE_DIR/.build.XXXXXX")
chmod 0755 "$WORK"
trap 'rm -rf "$WORK"' EXIT
DEBS=$WORK/debs STAGE=$WORK/stage KROOT=$WORK/kernel ROOT=$WORK/root
mkdir -p "$DEBS" "$STAGE" "$KROOT" "$ROOT"
# apt-get download drops privileges to _apt; let it write there.
chmod 0777 "$DEBS"

# ---------------------------------------------------------------------------
# Package set: the userspace packages plus the closure of their library
# dependencies (Depends/Pre-Depends whose name looks like a library; the first
# alternative of "a | b"). Tools such as python3 that fio depends on for its
# helper scripts are deliberately not followed. The ELF walk below verifies
# that every needed shared object was actually found.
declare -A seen=()
queue=("${USER_PKGS[@]}")
for p in "${queue[@]}"; do seen[$p]=1; done
while ((${#queue[@]})); do
	next=()
	deps=$(apt-cache "${APT[@]}" show --no-all-versions "${queue[@]}" |
		awk -F': ' '/^(Pre-)?Depends: / {print $2}' | tr ',' '\n' |
		sed -E 's/\|.*//; s/\(.*\)//; s/:any//; s/[[:space:]]//g' | sort -u)
	for d in $deps; do
		[[ $d =~ ^(lib|zlib1g$) ]] || continue
		[[ -n ${seen[$d]:-} ]] && continue
		seen[$d]=1
		next+=("$d")
	done
	queue=("${next[@]}")
done
pkgs=("${!seen[@]}")

(cd "$DEBS" && apt-get "${APT[@]}" download -q "$kpkg" "${pkgs[@]}" >"$WORK/download.log" 2>&1) ||
	{ cat "$WORK/download.log" >&2; die "apt-get download failed"; }

for deb in "$DEBS"/*.deb; do
	case $(basename "$deb") in
	linux-image-*) dpkg-deb -x "$deb" "$KROOT" ;;
	*) dpkg-deb -x "$deb" "$STAGE" ;;
	esac
done

# merge_usr DIR: make DIR a merged-/usr tree, as Debian 13 systems are
# (base-files creates the links there): whatever a package still put in
# /bin, /sbin, /lib or /lib64 moves under /usr, and those become relative
# links to usr/..., so that both the usual paths (/bin/kmod,
# /lib64/ld-linux-x86-64.so.2, /lib/modules) and the /usr ones resolve.
merge_usr() {
	local d
	for d in bin sbin lib lib64; do
		mkdir -p "$1/usr/$d"
		if [[ -d $1/$d && ! -L $1/$d ]]; then
			cp -a "$1/$d/." "$1/usr/$d/"
			rm -rf "${1:?}/$d"
		fi
		ln -sfn "usr/$d" "$1/$d"
	done
}
# The guest's root is merged too: the 6.12 modules live in /usr/lib/modules,
# and the kernel and the staged tools are happy either way.
if ((MERGED_USR)); then
	merge_usr "$STAGE"
	merge_usr "$KROOT"
	merge_usr "$ROOT"
fi

# ---------------------------------------------------------------------------
# Helpers working on the staging tree (paths are "guest" paths, i.e. absolute
# paths as they will appear in the guest, looked up under $STAGE).

# Resolve symlinks inside $STAGE (an absolute link target must not escape to the
# host's root). Prints the guest path of the final file.
stage_resolve() {
	local p=$1 t n=0
	while [[ -L $STAGE$p ]]; do
		t=$(readlink "$STAGE$p")
		[[ $t == /* ]] || t=$(dirname "$p")/$t
		p=$(realpath -m -s "$t")
		((++n < 40)) || die "symlink loop at $1"
	done
	[[ -e $STAGE$p ]] || return 1
	echo "$p"
}

declare -A copied=()
# Copy an ELF file from the stage to the same path in the initramfs, plus
# (recursively) the shared objects it needs, honouring RUNPATH/RPATH ($ORIGIN).
copy_elf() {
	local gpath=$1 real dyn lib dir found rp
	[[ -n ${copied[$gpath]:-} ]] && return 0
	copied[$gpath]=1
	real=$(stage_resolve "$gpath") || die "$gpath not found in staged packages"
	mkdir -p "$ROOT$(dirname "$gpath")"
	cp "$STAGE$real" "$ROOT$gpath"
	dyn=$(readelf -d "$STAGE$real" 2>/dev/null) || return 0
	local -a dirs=()
	for rp in $(sed -n 's/.*(R\(UN\)\?PATH).*\[\(.*\)\]/\2/p' <<<"$dyn" | tr ':' ' '); do
		dirs+=("$(realpath -m -s "${rp//\$ORIGIN/$(dirname "$gpath")}")")
	done
	dirs+=("/lib/$ARCH_TRIPLET" "/usr/lib/$ARCH_TRIPLET" /lib /usr/lib)
	for lib in $(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<<"$dyn"); do
		found=
		for dir in "${dirs[@]}"; do
			if stage_resolve "$dir/$lib" >/dev/null; then
				found=$dir/$lib
				break
			fi
		done
		[[ -n $found ]] || die "$lib (needed by $gpath) not in any staged package"
		copy_elf "$found"
	done
}

# siw.ko for $KVER into $KROOT's extra/: the soft-iWARP driver's sources
# from linux-source-X.Y, built against linux-headers-$KVER of the same
# package version (unpacked, its Makefile pointed at the unpacked common
# headers) with the gcc the kernel was built with.
build_siw() {
	local series=${KVER%%.*}.$(cut -d. -f2 <<<"$KVER") abi=${KVER%-*}
	local sdir=$WORK/siw sdebs=$WORK/siw/debs src=$WORK/siw/src
	mkdir -p "$sdebs" "$src"
	chmod 0777 "$sdebs"
	(cd "$sdebs" && apt-get "${APT[@]}" download -q "linux-source-$series=$kver_pkg" \
		"linux-headers-$KVER=$kver_pkg" "linux-headers-$abi-common=$kver_pkg" \
		"linux-kbuild-$series=$kver_pkg" >"$sdir/download.log" 2>&1) ||
		{ cat "$sdir/download.log" >&2; die "apt-get download of the kernel sources failed"; }
	for deb in "$sdebs"/linux-{headers,kbuild}-*.deb; do dpkg-deb -x "$deb" "$sdir/tree"; done
	local hdr=$sdir/tree/usr/src/linux-headers-$KVER
	sed -i "s|^include /usr/src/|include $sdir/tree/usr/src/|" "$hdr/Makefile"
	local cc
	cc=$(sed -n 's/^CC = .*)\(gcc-[0-9]*\)$/\1/p' "$hdr/.kernelvariables")
	command -v "${cc:-gcc}" >/dev/null || die "${cc:-gcc} (the kernel's compiler) is not installed"
	dpkg-deb --fsys-tarfile "$sdebs"/linux-source-*.deb |
		tar -xO "./usr/src/linux-source-$series.tar.xz" |
		xz -dc | tar -x -C "$src" "linux-source-$series/drivers/infiniband/sw/siw" ||
		die "no siw sources in linux-source-$series"
	local m=$src/linux-source-$series/drivers/infiniband/sw/siw
	make -C "$hdr" M="$m" CONFIG_RDMA_SIW=m modules >"$sdir/build.log" 2>&1 ||
		{ tail -n 30 "$sdir/build.log" >&2; die "building siw.ko failed"; }
	mkdir -p "$KROOT/lib/modules/$KVER/extra"
	strip --strip-debug -o "$KROOT/lib/modules/$KVER/extra/siw.ko" "$m/siw.ko"
	log "built siw.ko for $KVER with ${cc:-gcc}"
}

# Run the staged kmod (with the staged dynamic loader and libraries) as $1.
LDSO=$(stage_resolve /lib64/ld-linux-x86-64.so.2) || die "no dynamic loader staged (libc6?)"
kmod_as() {
	local name=$1
	shift
	"$STAGE$LDSO" --library-path "$STAGE/lib/$ARCH_TRIPLET:$STAGE/usr/lib/$ARCH_TRIPLET" \
		--argv0 "$name" "$STAGE/bin/kmod" "$@"
}

# ---------------------------------------------------------------------------
# Kernel and modules.
KVER=$(basename "$(ls -d "$KROOT"/lib/modules/*/ | head -n1)")
[[ -f $KROOT/boot/vmlinuz-$KVER ]] || die "no vmlinuz-$KVER in $kpkg"
if ((BUILD_SIW)); then build_siw; fi
kmod_as depmod -b "$KROOT" "$KVER"

declare -A kmods=()
missing=()
for m in "${MODULES[@]}"; do
	out=$(kmod_as modprobe -d "$KROOT" -S "$KVER" --show-depends --ignore-install "$m" 2>/dev/null) ||
		{ missing+=("$m"); continue; }
	while read -r verb path _; do
		[[ $verb == insmod ]] && kmods[$path]=1
	done <<<"$out"
done
((${#missing[@]} == 0)) || log "note: modules not in $KVER (skipped): ${missing[*]}"
mdir=/lib/modules/$KVER
mkdir -p "$ROOT$mdir"
for path in "${!kmods[@]}"; do
	rel=${path#*"$mdir"/}
	mkdir -p "$ROOT$mdir/$(dirname "$rel")"
	cp "$path" "$ROOT$mdir/$rel"
done
# 6.12's modules are xz-compressed: unpack them once here rather than in
# every guest boot (under TCG), and so that the guest's kmod needs no
# liblzma (which it would dlopen, e.g. for modinfo).
find "$ROOT$mdir" -name '*.ko.xz' -exec xz -d {} +
cp "$KROOT$mdir"/modules.{builtin,builtin.modinfo,order} "$ROOT$mdir/"
kmod_as depmod -b "$ROOT" "$KVER"

# ---------------------------------------------------------------------------
# Userspace.
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,run,root,test,mnt}
cp "$STAGE/bin/busybox" "$ROOT/bin/busybox"
copy_elf /bin/kmod
for t in modprobe insmod rmmod lsmod depmod modinfo; do
	ln -s /bin/kmod "$ROOT/sbin/$t"
done
copy_elf /usr/sbin/nvme
copy_elf /usr/bin/fio
copy_elf /usr/bin/rdma
copy_elf /lib64/ld-linux-x86-64.so.2
[[ -d $STAGE/etc/nvme ]] && cp -r "$STAGE/etc/nvme" "$ROOT/etc/"
if [[ $SUITE == trixie ]]; then
	copy_elf /usr/bin/keyctl
	copy_elf /usr/sbin/tlshd
	cp "$STAGE/etc/tlshd.conf" "$ROOT/etc/"
fi
# busybox applets for everything not provided otherwise
while read -r applet; do
	[[ -e $ROOT/$applet || -L $ROOT/$applet ]] && continue
	mkdir -p "$ROOT/$(dirname "$applet")"
	ln -s /bin/busybox "$ROOT/$applet"
done < <("$STAGE/bin/busybox" --list-full)

printf 'root:x:0:0:root:/root:/bin/sh\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\n' >"$ROOT/etc/group"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' >"$ROOT/etc/hosts"
install -m 0755 "$HERE/guest/init" "$ROOT/init"

# ---------------------------------------------------------------------------
# Pack. Owner is forced to root by building as root; order is deterministic.
(cd "$ROOT" && find . -mindepth 1 | LC_ALL=C sort |
	"$STAGE/bin/busybox" cpio -o -H newc 2>/dev/null) | gzip -6 -n >"$WORK/initramfs.cpio.gz"

{
	echo "kernel: $kpkg $kver_pkg ($KVER)"
	echo "recipe: $recipe_hash"
	echo "packages:"
	for deb in "$DEBS"/*.deb; do
		echo "  $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)"
	done
	echo "modules:"
	(cd "$ROOT$mdir" && find . -name '*.ko*' | LC_ALL=C sort | sed 's|^\./|  |')
	echo "initramfs: $(du -sh "$ROOT" | cut -f1) unpacked," \
		"$(du -h "$WORK/initramfs.cpio.gz" | cut -f1) compressed"
} >"$WORK/manifest.txt"

cp "$KROOT/boot/vmlinuz-$KVER" "$WORK/vmlinuz"
cp "$KROOT/boot/config-$KVER" "$WORK/config"
cp "$STAGE/bin/busybox" "$WORK/busybox"
echo "$KVER" >"$WORK/kernel-release"
echo "$key" >"$WORK/guest.stamp.new"
rm -f "$CACHE_DIR/guest.stamp"
for f in vmlinuz initramfs.cpio.gz busybox kernel-release manifest.txt config; do
	mv -f "$WORK/$f" "$CACHE_DIR/$f"
done
mv -f "$WORK/guest.stamp.new" "$CACHE_DIR/guest.stamp"
log "done in $((SECONDS - started))s: kernel $KVER," \
	"initramfs $(du -h "$CACHE_DIR/initramfs.cpio.gz" | cut -f1)"
