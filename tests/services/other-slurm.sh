#!/usr/bin/env bash
# The real-Slurm tests on the Slurm versions this machine does not run, each in a Debian chroot.
#
# Machines of our kind run Debian 12 (Slurm 22.05) or Debian 13 (Slurm 24.11), and every
# Slurm-facing part must work on both, and on Debian unstable's Slurm (26.05), the next one
# sites will meet (docs/architecture.md, "Slurm versions"). The host's own version is tested by
# `make test`; this script tests one other release: Debian 12 hosts trixie (24.11) or sid
# (26.05), Debian 13 hosts bookworm (22.05) or sid. Inside it runs the same test cluster
# (tests/services/slurm-cluster.sh, with ports of the release's own so that every chroot runs
# beside the host's cluster and beside each other) and the same tests (pytest -m slurm
# tests/slurm), with pal-slurm installed in a venv of the chroot's own Python.
#
# Usage: tests/services/other-slurm.sh [--suite RELEASE] {install|test [PYTEST ARGS...]|run CMD [ARGS...]|stop|status|suites}
#
#   install  debootstrap the release into $ROOT (once), install Python, Slurm, munge,
#            Lua and a compiler in it (slurm-cluster.sh install, run inside), and pal-slurm in
#            $ROOT/opt/pal-venv; idempotent, reinstalls pal-slurm when setup.cfg or the checkout moved
#   test     mount /proc, /sys, /dev, a fresh /run and the repository into the chroot, start
#            its test cluster (slurmrestd too), run the Slurm tests there, then stop the
#            cluster and unmount whatever the outcome; exit status: pytest's
#   run      as `test`, but runs CMD (a path in the repository, or a command of the chroot) in the
#            repository with the cluster's environment instead of pytest; exit status: CMD's
#   stop     stop the chroot's cluster and unmount (after an interrupted `test`); idempotent
#   status   the chroot's release, Slurm version and mounts
#   suites   the releases this host tests, one a line: the other stable release first, then sid
#
# --suite RELEASE (or PAL_OTHER_SLURM_SUITE): bookworm (Slurm 22.05), trixie (24.11) or sid
# (26.05), any but the host's own; default: the other stable release (trixie on Debian 12,
# bookworm on Debian 13), as before there was a choice.
#
# Environment:
#   PAL_OTHER_SLURM_ROOT   the chroot; default /var/tmp/pal-other-slurm-<release>
#   PAL_DEBIAN_MIRROR      Debian mirror for debootstrap; default http://deb.debian.org/debian
#   PAL_OTHER_SLURM_CTLD_PORT / _NODE_PORT   the chroot cluster's ports; default 23817 / 23001 for
#                          bookworm and trixie (never both on one host), 22817 / 22001 for sid
#                          (slurmrestd: ctld port + 2000), apart from the host cluster's, the
#                          replay's and the benchmarks' (16817, 16917, 19817, 26817)
#   The root and the ports name one release's chroot: set them for one run of one release.
#
# Needs root (debootstrap, chroot, mount). Progress goes to stderr; a failure ends with
# "other-slurm: error: <reason>".

set -euo pipefail

PROG="other-slurm"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MIRROR="${PAL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
VENV=/opt/pal-venv
PATH_IN="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# shellcheck source=tests/services/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SUITE="${PAL_OTHER_SLURM_SUITE:-}"
if [ "${1:-}" = --suite ]; then
    [ "$#" -ge 2 ] || die "--suite needs a release (bookworm, trixie or sid)"
    SUITE="$2"
    shift 2
fi

[ "${1:-}" = suites ] || [ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and mount)"

host_major() {
    [ -r /etc/debian_version ] || die "not a Debian machine (no /etc/debian_version)"
    cut -d. -f1 </etc/debian_version
}

# the host's own release: the one release this script does not test here
host_suite() {
    case "$(host_major)" in
        12) echo bookworm ;;
        13) echo trixie ;;
        *) die "Debian $(host_major) is neither 12 nor 13: the other Slurm versions are tested from those" ;;
    esac
}

# the releases a host tests: the other stable one (22.05 <-> 24.11), then unstable (26.05)
other_suites() {
    case "$(host_suite)" in
        bookworm) printf '%s\n' trixie sid ;;
        trixie) printf '%s\n' bookworm sid ;;
    esac
}

[ -n "$SUITE" ] || SUITE="$(other_suites | head -n 1)"
# grep without -q reads its input to the end: -q exits at the first match, and under pipefail the
# printf still writing the next line then fails the pipeline with SIGPIPE (seen: trixie refused)
other_suites | grep -x -- "$SUITE" >/dev/null ||
    die "release '$SUITE' is not tested on this Debian $(host_major) host (these are: $(other_suites | paste -sd' ' -))"

# each release its own ports: its cluster runs beside the host's and the other chroot's
case "$SUITE" in
    sid) CTLD_PORT="${PAL_OTHER_SLURM_CTLD_PORT:-22817}" NODE_PORT="${PAL_OTHER_SLURM_NODE_PORT:-22001}" ;;
    *) CTLD_PORT="${PAL_OTHER_SLURM_CTLD_PORT:-23817}" NODE_PORT="${PAL_OTHER_SLURM_NODE_PORT:-23001}" ;;
esac
case "$CTLD_PORT$NODE_PORT" in *[!0-9]*) die "ports must be numbers" ;; esac
ROOT="${PAL_OTHER_SLURM_ROOT:-/var/tmp/pal-other-slurm-$SUITE}"

# the host's proxy and pip settings that let pip inside reach an index the way pip outside does
passed_env() {
    local v
    for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY PIP_INDEX_URL PIP_EXTRA_INDEX_URL \
        PIP_DEFAULT_TIMEOUT PIP_TRUSTED_HOST; do
        if [ -n "${!v:-}" ]; then printf '%s=%s\n' "$v" "${!v}"; fi
    done
}

# run a command inside the chroot with a clean environment (no host Python, no host SLURM_CONF)
inside() {
    local env=()
    mapfile -t env < <(passed_env)
    chroot "$ROOT" /usr/bin/env -i HOME=/root PATH="$PATH_IN" LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
        PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1 "${env[@]}" "$@"
}

# the chroot trusts the certificate authorities the host added (a site's TLS-inspecting
# proxy, for instance), so pip and apt inside reach what they reach outside
trust_host_cas() {
    local src=/usr/local/share/ca-certificates
    [ -d "$src" ] && [ -n "$(ls -A "$src" 2>/dev/null)" ] || return 0
    mkdir -p "$ROOT$src"
    cp -a "$src/." "$ROOT$src/"
    inside update-ca-certificates >/dev/null 2>&1 || log "install: update-ca-certificates in the chroot failed"
}

cluster_env() {
    printf '%s\n' PAL_TEST_SLURM_DIR=/var/tmp/pal-test-slurm PAL_TEST_SLURM_CTLD_PORT="$CTLD_PORT" \
        PAL_TEST_SLURM_NODE_PORT="$NODE_PORT" PAL_TEST_SLURM_REST=1 PAL_PYTHON="$VENV/bin/python"
}

mounted() { mountpoint -q "$1"; }

# apt-get update in the chroot. sid's Release is valid for a week only (stable releases' for
# good): a mirror that is a frozen snapshot (a site's, or a CI cache) serves one that apt calls
# expired and refuses. Then, and only then, this test chroot's apt stops checking that date
# (the signatures are still checked) and says so.
apt_update_inside() {
    local out="$ROOT.apt-update.log" conf="$ROOT/etc/apt/apt.conf.d/99pal-snapshot-mirror"
    inside apt-get update -q >"$out" 2>&1 && ! grep -q 'is expired' "$out" && return 0
    grep -q 'is expired' "$out" || { tail -n 15 "$out" >&2; die "apt-get update in the $SUITE chroot failed"; }
    log "install: $MIRROR serves an expired $SUITE Release (a snapshot?): apt in this chroot ignores its Valid-Until"
    printf 'Acquire::Check-Valid-Until "false";\n' >"$conf"
    inside apt-get update -q >"$out" 2>&1 || { tail -n 15 "$out" >&2; die "apt-get update in the $SUITE chroot failed"; }
}

# "Slurm 24.11.5-4+deb13u1 in Debian 13.8" (sinfo --version needs a configuration to answer)
slurm_in() {
    local v
    # shellcheck disable=SC2016  # ${Version} is dpkg-query's field, not ours
    v="$(chroot "$ROOT" dpkg-query -W -f '${Version}' slurmctld 2>/dev/null)" || v="not installed"
    printf 'Slurm %s in Debian %s' "$v" "$(cat "$ROOT/etc/debian_version")"
}

do_mount() {
    # the binds are made slaves: where / is a shared mount (systemd), an rbind joins the host's
    # peer groups, and do_umount's `umount -R` would then unmount the host's own /dev/shm,
    # /dev/pts and cgroup mounts too, while the host's tests run beside the chroot's
    mounted "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
    mounted "$ROOT/sys" || { mount --rbind /sys "$ROOT/sys" && mount --make-rslave "$ROOT/sys"; }
    mounted "$ROOT/dev" || { mount --rbind /dev "$ROOT/dev" && mount --make-rslave "$ROOT/dev"; }
    mounted "$ROOT/run" || mount -t tmpfs -o mode=0755 tmpfs "$ROOT/run"
    mkdir -p "$ROOT$REPO"
    mounted "$ROOT$REPO" || { mount --bind "$REPO" "$ROOT$REPO" && mount --make-rslave "$ROOT$REPO"; }
    # slurmctld must resolve this machine's name (SlurmctldHost) inside as it does outside
    local name
    name="$(hostname)"
    [ -s "$ROOT/etc/hosts" ] || cp /etc/hosts "$ROOT/etc/hosts"
    grep -qw -- "$name" "$ROOT/etc/hosts" 2>/dev/null || printf '127.0.1.1 %s\n' "$name" >>"$ROOT/etc/hosts"
    cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
}

do_umount() {
    local m
    for m in "$ROOT$REPO" "$ROOT/run" "$ROOT/dev" "$ROOT/sys" "$ROOT/proc"; do
        if mounted "$m"; then umount -R "$m" 2>/dev/null || umount -R -l "$m"; fi
    done
}

cmd_install() {
    if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
        command -v debootstrap >/dev/null 2>&1 || {
            log "install: apt-get install debootstrap"
            { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends debootstrap >&2; } ||
                die "cannot install debootstrap"
        }
        log "install: debootstrap $SUITE into $ROOT (from $MIRROR; log $ROOT.debootstrap.log)"
        do_umount  # a half-made root from an interrupted run may still have mounts
        rm -rf --one-file-system "$ROOT"
        if ! debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$ROOT" "$MIRROR" \
            >"$ROOT.debootstrap.log" 2>&1; then
            tail -n 15 "$ROOT.debootstrap.log" >&2
            die "debootstrap $SUITE failed (mirror $MIRROR; set PAL_DEBIAN_MIRROR)"
        fi
    fi
    do_mount
    trap do_umount EXIT
    if ! inside sh -c 'command -v python3 >/dev/null && python3 -c "import ensurepip, venv"' 2>/dev/null; then
        log "install: python3 in the chroot"
        apt_update_inside
        inside apt-get install -y -qq --no-install-recommends python3 python3-venv >"$ROOT.apt.log" 2>&1 || {
            tail -n 15 "$ROOT.apt.log" >&2
            die "apt-get install python3 python3-venv in the $SUITE chroot failed"
        }
    fi
    trust_host_cas
    # Slurm, munge, Lua, gcc, slurmrestd: the same package logic as the host's cluster
    # shellcheck disable=SC2046  # one word per variable
    inside env $(cluster_env) bash "$REPO/tests/services/slurm-cluster.sh" install
    local stamp="$ROOT$VENV/.installed" want
    # the install is editable: a different checkout path needs its own, as do changed dependencies
    want="$({ echo "$REPO"; cat "$REPO/setup.cfg" "$REPO/pyproject.toml"; } | sha256sum | cut -d' ' -f1)"
    if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
        log "install: pal-slurm into $VENV (the chroot's $(inside python3 --version 2>&1))"
        inside python3 -m venv "$VENV" >&2
        inside "$VENV/bin/python" -m pip install -q --upgrade pip >&2
        inside "$VENV/bin/python" -m pip install -q -e "${REPO}[dev]" >&2 || die "pip install of pal-slurm in the chroot failed"
        printf '%s\n' "$want" >"$stamp"
    fi
    log "install: done ($(slurm_in))"
}

cluster_stop() {
    [ -d "$ROOT$REPO/tests" ] || return 0
    # shellcheck disable=SC2046
    inside env $(cluster_env) bash "$REPO/tests/services/slurm-cluster.sh" stop || true
}

# mount, make sure the chroot's pal-slurm is this checkout's, start the cluster (stopped and
# unmounted again on exit)
cluster_up() {
    [ -x "$ROOT$VENV/bin/python" ] || die "the chroot is not installed: run '$0 install' first"
    do_mount
    # jobs import pal_slurm through the venv's editable install, not the test's working directory:
    # one made from another checkout (the chroot is shared by checkouts on this machine) would run
    # that checkout's code, or none. Install this one again then.
    local found
    found="$(inside "$VENV/bin/python" -c 'import pal_slurm; print(pal_slurm.__file__)' 2>/dev/null </dev/null)" || found=""
    if [ "$found" != "$REPO/pal_slurm/__init__.py" ]; then
        log "test: the chroot's pal_slurm is ${found:-not importable}, not this checkout's: installing it again"
        rm -f "$ROOT$VENV/.installed"
        cmd_install
        do_mount
    fi
    trap 'cluster_stop; do_umount' EXIT
    # shellcheck disable=SC2046
    inside env $(cluster_env) bash "$REPO/tests/services/slurm-cluster.sh" start
}

cmd_run() {
    [ "$#" -gt 0 ] || die "run needs a command"
    cluster_up
    log "run: $(slurm_in): $*"
    local rc=0
    # shellcheck disable=SC2046,SC2016  # the inner script's $1 and $(...) are the inner bash's
    inside env $(cluster_env) bash -c \
        'cd "$1" && shift && eval "$(bash tests/services/slurm-cluster.sh env)" && exec "$@"' _ "$REPO" "$@" || rc=$?
    return "$rc"
}

cmd_test() {
    cluster_up
    # test paths among the arguments narrow the run, as they do pytest's on the host; else tests/slurm
    local a where=tests/slurm
    for a in "$@"; do
        case "$a" in -*) ;; *) [ -e "$REPO/${a%%::*}" ] || [ -e "${a%%::*}" ] && where="" ;; esac
    done
    log "test: $(slurm_in): pytest -m slurm ${where:+$where }$*"
    local rc=0
    # the cluster's env (SLURM_CONF, the slurmrestd URL) comes from the script, as in `make test`;
    # -p no:cacheprovider: nothing of the chroot's run is written into the repository's cache
    # shellcheck disable=SC2046,SC2016  # the inner script's $1, $2 and $(...) are the inner bash's
    inside env $(cluster_env) PAL_REQUIRE_SLURM=1 PAL_REQUIRE_SLURM_REST=1 bash -c \
        'cd "$1" && where="$2" && shift 2 && eval "$(bash tests/services/slurm-cluster.sh env)" &&
         exec "$PAL_PYTHON" -m pytest -p no:cacheprovider -m slurm ${where:+"$where"} "$@"' _ "$REPO" "$where" "$@" \
        || rc=$?
    return "$rc"
}

cmd_stop() {
    if [ -d "$ROOT/proc" ] && mounted "$ROOT/proc"; then
        cluster_stop
    fi
    do_umount
}

cmd_status() {
    [ -r "$ROOT/etc/debian_version" ] || die "no chroot at $ROOT (run '$0 install')"
    echo "root: $ROOT (Debian $(cat "$ROOT/etc/debian_version"), $SUITE)"
    echo "slurm: $(slurm_in)"
    echo "pal-slurm venv: $([ -x "$ROOT$VENV/bin/python" ] && echo "$VENV" || echo 'not installed')"
    grep -F " $ROOT" /proc/mounts | cut -d' ' -f2 | sed 's/^/mounted: /' || true
}

case "${1:-}" in
    install) cmd_install ;;
    test) shift; cmd_test "$@" ;;
    run) shift; cmd_run "$@" ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    suites) other_suites ;;
    *) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
