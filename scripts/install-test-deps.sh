#!/usr/bin/env bash
# Installs the Debian packages the test suite runs as real programs: PostgreSQL, Redis and nginx
# (tests/servers.py, tests/test_deploy_files.py), Chromium and chromedriver
# (tests/test_capture_browser.py), espeak-ng and codec2 (tests/test_antispoof.py), the AMR-NB and Opus
# codec libraries (common/telephone.py, tests/test_telephone.py), buildah, podman and mmdebstrap
# (scripts/build-image.sh, tests/test_image.py).
# `make test` runs it
# before pytest. The tests never install anything: a missing program fails them with a message
# naming this script (the browser and `nginx -t` tests skip instead when not run as root).
#
# Idempotent and quick: it only looks for the programs, and calls apt-get (through sudo when not
# root) for the packages whose programs are missing.
set -euo pipefail

missing=()

# has <program or absolute path>...: true when any of them is there.
has() {
    local p
    for p in "$@"; do
        if [[ $p == /* ]]; then
            [[ -x $p ]] && return 0
        elif command -v "$p" >/dev/null 2>&1; then
            return 0
        fi
    done
    return 1
}

# Debian keeps the PostgreSQL server programs off PATH, one folder per major version (as the
# tests look for them: the folder of pg_ctl on PATH, then /usr/lib/postgresql/*/bin).
has_postgres() {
    local pg_ctl d
    pg_ctl=$(command -v pg_ctl 2>/dev/null || true)
    for d in ${pg_ctl:+"$(dirname "$(readlink -f "$pg_ctl")")"} /usr/lib/postgresql/*/bin; do
        [[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]] && return 0
    done
    return 1
}

# has_lib <soname>: a shared library the dynamic linker knows.
has_lib() {
    ldconfig -p 2>/dev/null | grep -q "$1" || [[ -e /usr/lib/x86_64-linux-gnu/$1 || -e /usr/lib/aarch64-linux-gnu/$1 ]]
}

check() {
    missing=()
    has_postgres || missing+=(postgresql)
    has redis-server || missing+=(redis-server)
    has nginx /usr/sbin/nginx || missing+=(nginx)
    has /usr/bin/chromium || missing+=(chromium)
    has /usr/bin/chromedriver || missing+=(chromium-driver)
    has espeak-ng || missing+=(espeak-ng)
    has c2enc || missing+=(codec2)
    has_lib libopencore-amrnb.so.0 || missing+=(libopencore-amrnb0)
    has_lib libopus.so.0 || missing+=(libopus0)
    # The service image (tests/test_image.py, scripts/build-image.sh) and the compose check.
    has buildah || missing+=(buildah)
    has podman || missing+=(podman)
    has mmdebstrap || missing+=(mmdebstrap)
    # As root the tests run PostgreSQL as the `postgres` user through runuser.
    has runuser /usr/sbin/runuser || missing+=(util-linux)
}

check
if ((${#missing[@]} == 0)); then
    exit 0
fi

echo "install-test-deps: installing Debian packages: ${missing[*]}" >&2
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-test-deps: apt-get not found; install these packages by hand: ${missing[*]}" >&2
    exit 1
fi
if ((EUID != 0)) && ! command -v sudo >/dev/null 2>&1; then
    echo "install-test-deps: not root and no sudo; as root run: apt-get install ${missing[*]}" >&2
    exit 1
fi

as_root() {
    if ((EUID == 0)); then "$@"; else sudo "$@"; fi
}

as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"

check
if ((${#missing[@]} != 0)); then
    echo "install-test-deps: installed, but still missing the programs of: ${missing[*]}" >&2
    exit 1
fi
