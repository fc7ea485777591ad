#!/bin/bash
# build-guest.sh [CACHE_DIR]
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
# CACHE_DIR defaults to $NVME_DDP_VM_CACHE or /var/cache/nvme-ddp-vm.
# Exit status: 0 ok (built or cached), 77 cannot build here (skip), 1 error.
set -euo pipefail

HERE=$(dirname "$(readlink -f "$0")")
CACHE_DIR=${1:-${NVME_DDP_VM_CACHE:-/var/cache/nvme-ddp-vm}}
ARCH_TRIPLET=x86_64-linux-gnu

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

# ---------------------------------------------------------------------------
# Cache key: kernel package + version, plus the build recipe itself.
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
	awk '/Depends: linux-image-[0-9]/ {print $2; exit}') || true
kver_pkg=
[[ -n $kpkg ]] && kver_pkg=$(apt-cache show --no-all-versions "$kpkg" 2>/dev/null |
	awk '/^Version:/ {print $2; exit}')
outputs=(vmlinuz initramfs.cpio.gz busybox kernel-release guest.stamp)
have_outputs() {
	local f
	for f in "${outputs[@]}"; do [[ -s $CACHE_DIR/$f ]] || return 1; done
}
if [[ -z $kpkg || -z $kver_pkg ]]; then
	# No apt metadata (offline, lists not fetched): an existing cache is fine.
	have_outputs && exit 0
	skip "cannot resolve linux-image-amd64 with apt-cache (run apt-get update)"
fi
recipe_hash=$(cat "$HERE/build-guest.sh" "$HERE/guest/init" | sha256sum | cut -c1-16)
key="$kpkg $kver_pkg recipe=$recipe_hash"
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
	deps=$(apt-cache show --no-all-versions "${queue[@]}" |
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

(cd "$DEBS" && apt-get download -q "$kpkg" "${pkgs[@]}" >"$WORK/download.log" 2>&1) ||
	{ cat "$WORK/download.log" >&2; die "apt-get download failed"; }

for deb in "$DEBS"/*.deb; do
	case $(basename "$deb") in
	linux-image-*) dpkg-deb -x "$deb" "$KROOT" ;;
	*) dpkg-deb -x "$deb" "$STAGE" ;;
	esac
done

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
	(cd "$sdebs" && apt-get download -q "linux-source-$series=$kver_pkg" \
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
build_siw
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
