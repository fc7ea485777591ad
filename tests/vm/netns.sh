# Sourced by the VM scripts: the network namespace a run makes, and the
# clean-up of those that earlier runs left when they were killed.
#
# A run's namespace is PREFIX-PID. PREFIX is $NVME_DDP_NETNS_PREFIX, or the
# script's own default, so that two jobs on one machine (or a CI runner
# with namespaces of its own) can keep theirs apart.

# netns_name DEFAULT_PREFIX: set NS_PREFIX and NS, or exit 2 on a prefix
# that is no name for a namespace.
netns_name() {
	NS_PREFIX=${NVME_DDP_NETNS_PREFIX:-$1}
	if [[ ! $NS_PREFIX =~ ^[A-Za-z0-9_.-]{1,40}$ ]]; then
		echo "$(basename "$0"): NVME_DDP_NETNS_PREFIX=\"$NS_PREFIX\" is no namespace name: use 1 to 40 letters, digits, '.', '_' or '-'" >&2
		exit 2
	fi
	NS=$NS_PREFIX-$$
}

# netns_sweep: remove PREFIX-PID namespaces whose creator is gone and in
# which nothing runs any more.
netns_sweep() {
	local old
	for old in $(ip netns list | awk -v p="$NS_PREFIX-" 'index($1, p) == 1 && substr($1, length(p) + 1) ~ /^[0-9]+$/ { print $1 }'); do
		kill -0 "${old##*-}" 2>/dev/null && continue
		[[ -z $(ip netns pids "$old" 2>/dev/null) ]] && ip netns del "$old" 2>/dev/null || true
	done
}
