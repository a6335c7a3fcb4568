#!/usr/bin/env bash
# Builds verilive's service images from deploy/Dockerfile, with the models baked in.
#
#   scripts/build-image.sh                 # the `all` image
#   scripts/build-image.sh face voice      # one image per named service (face, voice, capture, all)
#
# Environment:
#   PYTHON_IMAGE            base image (default localhost/bookworm-python:3.11, made here from the
#                           Debian mirror with mmdebstrap when it is not there yet; set it to
#                           python:3.11-slim-bookworm where a registry is reachable)
#   VERILIVE_MODEL_MIRROR   folder of model source files, the build context "mirror"
#                           (default: deploy/empty-mirror, i.e. every model from its upstream)
#   IMAGE_PREFIX, IMAGE_TAG image names: ${IMAGE_PREFIX}<service>:${IMAGE_TAG}
#                           (default localhost/verilive-<service>:dev)
#   BUILDER                 buildah or docker (default: buildah if present, else docker)
#
# With buildah the build runs with chroot isolation and the host network, and the host's pip
# configuration (pip.conf files and the local folders and files they name) and CA certificates are
# mounted read-only into the RUN steps, so pip inside the build resolves packages exactly as on the
# host (a package proxy, local wheels). That is this build host's business, not the Dockerfile's:
# the Dockerfile stays a normal one that `docker build` builds anywhere.
#
# Prints each image's size and the versions inside it. docs/deployment.md shows a run.
set -euo pipefail
cd "$(dirname "$0")/.."

services=("$@")
((${#services[@]})) || services=(all)
for s in "${services[@]}"; do
    case "$s" in
        face | voice | capture | all) ;;
        *) echo "build-image: unknown service '$s' (face, voice, capture or all)" >&2; exit 64 ;;
    esac
done

BASE_IMAGE=localhost/bookworm-python:3.11
PYTHON_IMAGE=${PYTHON_IMAGE:-$BASE_IMAGE}
MIRROR=${VERILIVE_MODEL_MIRROR:-deploy/empty-mirror}
IMAGE_PREFIX=${IMAGE_PREFIX:-localhost/verilive-}
IMAGE_TAG=${IMAGE_TAG:-dev}
if [[ -z ${BUILDER:-} ]]; then
    if command -v buildah >/dev/null 2>&1; then BUILDER=buildah
    elif command -v docker >/dev/null 2>&1; then BUILDER=docker
    else
        echo "build-image: neither buildah nor docker found (Debian: apt-get install buildah podman mmdebstrap)" >&2
        exit 69
    fi
fi
if [[ ! -d $MIRROR ]]; then
    echo "build-image: VERILIVE_MODEL_MIRROR=$MIRROR is not a folder" >&2
    exit 66
fi
MIRROR=$(cd "$MIRROR" && pwd)

engine() {  # the image store the builder writes to
    if [[ $BUILDER == buildah ]]; then podman "$@"; else docker "$@"; fi
}

has_image() {
    if [[ $BUILDER == buildah ]]; then buildah inspect --type image "$1" >/dev/null 2>&1
    else docker image inspect "$1" >/dev/null 2>&1; fi
}

# ------------------------------------------------------------------ the Debian base
make_base() {
    local tmp
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    echo "build-image: making $BASE_IMAGE from the Debian mirror (mmdebstrap, ~40 s)" >&2
    if ! command -v mmdebstrap >/dev/null 2>&1; then
        echo "build-image: mmdebstrap not found (apt-get install mmdebstrap), or set PYTHON_IMAGE" >&2
        exit 69
    fi
    # Python 3.11 (bookworm's), venv, CA certificates; no documentation, manuals or locales.
    mmdebstrap --variant=minbase --quiet \
        --include=python3,python3-venv,python-is-python3,ca-certificates \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        bookworm "$tmp/rootfs.tar"
    if [[ $BUILDER == buildah ]]; then
        podman import --quiet "$tmp/rootfs.tar" "$BASE_IMAGE" >/dev/null
    else
        docker import "$tmp/rootfs.tar" "$BASE_IMAGE" >/dev/null
    fi
}

if [[ $PYTHON_IMAGE == "$BASE_IMAGE" ]] && ! has_image "$BASE_IMAGE"; then
    make_base
fi

# ------------------------------------------------------------------ pip inside a buildah build
pip_mounts=()
add_mount() {  # add_mount <host path> [<path inside>]: once each, read-only
    local src=$1 dst=${2:-$1} m
    [[ -e $src ]] || return 0
    for m in "${pip_mounts[@]}"; do [[ $m == "-v" || $m != "$src:"* ]] || return 0; done
    pip_mounts+=(-v "$src:$dst:ro")
}
if [[ $BUILDER == buildah ]]; then
    add_mount /etc/ssl/certs
    confs=(/etc/pip.conf /etc/xdg/pip/pip.conf "$HOME/.config/pip/pip.conf" "$HOME/.pip/pip.conf")
    [[ -n ${PIP_CONFIG_FILE:-} ]] && confs+=("$PIP_CONFIG_FILE")
    for conf in "${confs[@]}"; do
        [[ -f $conf ]] || continue
        # RUN steps run as root: a user's configuration goes where root's pip looks.
        case "$conf" in
            "$HOME"/*) add_mount "$conf" "/root/${conf#"$HOME"/}" ;;
            *) add_mount "$conf" ;;
        esac
        # The local folders and files it names: find-links, file:// indexes, constraints, certs.
        while read -r p; do
            add_mount "$p"
        done < <(grep -oE '(file://)?/[^[:space:]"'"'"']+' "$conf" | sed 's|^file://||' | sed 's|/simple/*$||')
    done
fi

# ------------------------------------------------------------------ build
built=()
for s in "${services[@]}"; do
    image="${IMAGE_PREFIX}${s}:${IMAGE_TAG}"
    echo "build-image: building $image (base $PYTHON_IMAGE, mirror $MIRROR)" >&2
    t0=$(date +%s)
    log=$(mktemp "${TMPDIR:-/tmp}/verilive-build-$s.XXXXXX.log")
    if [[ $BUILDER == buildah ]]; then
        cmd=(buildah bud --isolation chroot --network host --format docker --layers
            "${pip_mounts[@]}"
            --ignorefile deploy/Dockerfile.dockerignore -f deploy/Dockerfile
            --build-arg PYTHON_IMAGE="$PYTHON_IMAGE" --build-arg SERVICE="$s"
            --build-context mirror="$MIRROR" -t "$image" .)
    else
        cmd=(env DOCKER_BUILDKIT=1 docker build -f deploy/Dockerfile
            --build-arg PYTHON_IMAGE="$PYTHON_IMAGE" --build-arg SERVICE="$s"
            --build-context mirror="$MIRROR" -t "$image" .)
    fi
    if ! "${cmd[@]}" >"$log" 2>&1; then
        echo "build-image: building $image failed; the last lines of $log:" >&2
        tail -n 60 "$log" >&2
        exit 1
    fi
    rm -f "$log"
    echo "build-image: $image built in $(($(date +%s) - t0)) s" >&2
    built+=("$image")
done

# ------------------------------------------------------------------ what is inside
inside() {  # inside <image> <command...>: run a command in the image, not as a service
    local image=$1 ctr
    shift
    if [[ $BUILDER == buildah ]]; then
        ctr=$(buildah from --quiet "$image")
        buildah run --isolation chroot "$ctr" -- "$@" || true
        buildah rm "$ctr" >/dev/null
    else
        docker run --rm --entrypoint "$1" "$image" "${@:2}" || true
    fi
}
for image in "${built[@]}"; do
    size=$(engine image inspect --format '{{.Size}}' "$image")
    echo "== $image: $((size / 1000000)) MB"
    inside "$image" python -c '
import importlib.metadata as md, json, os, platform
names = ("verilive", "onnxruntime", "numpy", "opencv-python-headless", "fastapi", "uvicorn", "torch")
print("python", platform.python_version())
for n in names:
    try:
        print(n, md.version(n))
    except md.PackageNotFoundError:
        print(n, "not installed")
for d in sorted(md.distributions(), key=lambda d: d.metadata["Name"].lower()):
    print("dist", d.metadata["Name"], d.version)
root = os.environ["VERILIVE_MODELS_DIR"]
for m in sorted(os.listdir(root)):
    rec = json.load(open(os.path.join(root, m, "manifest.json")))
    print("model", m, rec["version"])
'
done
