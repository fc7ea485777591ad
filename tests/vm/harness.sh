# Sourced by the interop scripts (interop.sh, auth-interop.sh,
# tls-interop.sh), after netns.sh: the host side they share. Each sets
# HARNESS (its name, for its lines), HERE, ROOT, BIN, CACHE_DIR, TIMEOUT
# and GUEST_IP first, and calls netns_name.
#
#   say / skip           a verdict line (FAILs said again on exit) / exit 77
#   harness_start TOOLS  root and tools checked, stale namespaces swept, a
#                        scratch directory $TMP, clean-up on exit (guest,
#                        capture, controllers in PIDS, the namespace; on
#                        failure the logs' tails and the FAILs)
#   harness_build ARGS   our binary (unless NVME_DDP_BIN) and the guest
#                        (build-guest.sh ARGS)
#   in_ns CMD            CMD in the namespace
#   guest_alive, console, relay
#                        the guest's state, its console, its verdicts relayed
#                        as they come
#   signal MSG, guest_check KIND WHAT
#                        a word to the guest's wait_signal; a check of the
#                        guest's logs since the last one, waited for
#   our_host WHAT WANT ARGS
#                        our host against the guest's target with ARGS
#   stop_controllers     every controller in PIDS alive, then stopped
#                        (SIGINT, as Ctrl-C)

# Failed checks are said where they happen and again last thing on exit,
# after the logs, so the tail of a CI log names them.
FAILED=()
say() {
	echo "$HARNESS: $*"
	[[ $1 == FAIL* ]] && FAILED+=("$*")
	return 0
}
skip() { echo "$HARNESS: skipping: $*" >&2; exit 77; }

in_ns() { ip netns exec "$NS" "$@"; }

harness_start() {
	local tool
	((EUID == 0)) || skip "not root"
	[[ -c /dev/net/tun ]] || skip "/dev/net/tun missing"
	for tool in qemu-system-x86_64 ip "$@"; do
		command -v "$tool" >/dev/null || skip "$tool not installed"
	done
	netns_sweep
	say "network namespace $NS"
	start=$SECONDS
	TMP=$(mktemp -d "/tmp/nvme-ddp-$HARNESS.XXXXXX")
	PIDS=()
	GUEST_PID=
	CAP_PID=
	trap harness_cleanup EXIT
	trap 'exit 130' INT TERM
}

harness_cleanup() {
	local rc=$? f p
	# A `wait` on a process just killed fails (143), and under set -e that
	# would end the clean-up there, leaving controllers and the namespace.
	set +e
	if [[ -n $GUEST_PID ]]; then kill "$GUEST_PID" 2>/dev/null && wait "$GUEST_PID" 2>/dev/null; fi
	if [[ -n $CAP_PID ]]; then kill "$CAP_PID" 2>/dev/null && wait "$CAP_PID" 2>/dev/null; fi
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	ip netns del "$NS" 2>/dev/null || true
	if ((rc != 0 && rc != 77)); then
		for f in "$TMP"/*.log; do
			[[ -s $f ]] || continue
			echo "--- $(basename "$f") (last 40 lines) ---"
			tail -n 40 "$f"
		done >&2
		printf '%s: failed: %s\n' "$HARNESS" "${FAILED[@]:-exit status $rc}" >&2
	fi
	rm -rf "$TMP"
	exit "$rc"
}

harness_build() {
	local rc=0
	if [[ -z ${NVME_DDP_BIN:-} ]]; then
		(cd "$ROOT" && cargo build --release --quiet) || { say "FAIL: cargo build"; exit 1; }
	fi
	[[ -x $BIN ]] || { say "FAIL: no binary at $BIN"; exit 1; }
	"$HERE/build-guest.sh" "$@" "$CACHE_DIR" >"$TMP/build-guest.log" 2>&1 || rc=$?
	((rc == 0)) || {
		((rc == 77)) && skip "cannot build the guest: $(tail -n1 "$TMP/build-guest.log")"
		say "FAIL: build-guest.sh $* ($rc)"
		exit 1
	}
}

guest_alive() { kill -0 "$GUEST_PID" 2>/dev/null; }
console() { [[ -e $TMP/guest-console.log ]] && tr -d '\r' <"$TMP/guest-console.log" || true; }

# The guest's verdicts, relayed as they come.
shown=0
relay() {
	local lines n
	lines=$(console | grep -aE '^(ok  |FAIL)' || true)
	n=$(printf '%s' "$lines" | grep -c . || true)
	if ((n > shown)); then
		printf '%s\n' "$lines" | tail -n "$((n - shown))" | sed 's/^/guest: /'
		shown=$n
	fi
}

# signal MSG: one line to the guest's wait_signal.
signal() {
	for _ in $(seq 30); do
		guest_alive || return 1
		in_ns timeout 5 bash -c 'echo "$2" >"/dev/tcp/$0/$1"' "$GUEST_IP" "$SIGNAL_PORT" "$1" 2>/dev/null && return 0
		sleep 1
	done
	return 1
}

# guest_check KIND WHAT: the guest holds its logs since its last check to
# KIND (clean, or the refusal they come from) and says so.
checks=0
guest_check() {
	checks=$((checks + 1))
	signal "check $*" || { say "FAIL: the guest did not take check $*"; return 0; }
	for _ in $(seq 120); do
		console | grep -aqx "GUEST-CHECKED $checks" && break
		guest_alive || break
		sleep 0.5
	done
	relay
	console | grep -aqx "GUEST-CHECKED $checks" || say "FAIL: the guest did not answer check $*"
}

# our_host WHAT WANT ARGS...: our host against the guest's target
# ($GUEST_IP:$PORT, $TARGET_NQN) with ARGS; WANT is ok, or an ERE its error
# must match (it must fail). TOOK is how long it took.
host_failures=0
our_host() {
	local what=$1 want=$2 out rc=0 t0=${EPOCHREALTIME/./}
	shift 2
	out=$(in_ns timeout 300 "$BIN" host --connect "$GUEST_IP:$PORT" --nqn "$TARGET_NQN" "$@" 2>&1) || rc=$?
	local ms=$(((${EPOCHREALTIME/./} - t0) / 1000))
	TOOK=$(printf '%d.%02d' $((ms / 1000)) $((ms % 1000 / 10)))
	{
		echo "### $what (status $rc, ${TOOK}s): $*"
		echo "$out"
	} >>"$TMP/host.log"
	if [[ $want == ok ]]; then
		if ((rc == 0)); then
			say "ok   $what (${TOOK}s): $(echo "$out" | grep -E 'IOPS|^nvme\+tcp://' | head -n1 | tr -s ' ')"
			return 0
		fi
	elif ((rc != 0)) && grep -qE "$want" <<<"$out"; then
		say "ok   $what: refused, status $rc: $(grep -E "$want" <<<"$out" | head -n1)"
		return 0
	fi
	say "FAIL $what (status $rc)"
	echo "$out" | sed 's/^/  /'
	host_failures=$((host_failures + 1))
}

# stop_controllers: every controller must have outlived everything thrown
# at it; then each is stopped as Ctrl-C stops it, and killed if it lingers.
stop_controllers() {
	local p alive
	for p in "${PIDS[@]}"; do
		kill -0 "$p" 2>/dev/null || { say "FAIL: a controller died (see its log)"; exit 1; }
	done
	for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	for _ in $(seq 50); do
		alive=0
		for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		((alive)) || break
		sleep 0.1
	done
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	PIDS=()
}
