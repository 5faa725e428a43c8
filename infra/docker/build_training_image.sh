#!/usr/bin/env bash
# Build the training image (rlrun:<version>) without a container registry, then check it.
#
# The image is what infra/docker/training/Dockerfile describes; this script carries out that
# file's own instructions instead of `docker build`, on a base made here: a minimal Debian 12
# (bookworm) root file system from debootstrap, which is what the Dockerfile's
# debian:bookworm-slim is. Each RUN runs in a chroot of that root (network: this machine's; pip
# downloads from PyPI, apt from the Debian mirror), each COPY copies from this checkout, and ENV,
# WORKDIR, ENTRYPOINT and CMD become the settings of the image `docker import` makes. What goes
# into the image is infra/docker/training/install.sh, which the Dockerfile's RUN lines call, so
# both builds install the same. Instructions other than FROM debian:bookworm-slim, WORKDIR, COPY,
# RUN, ENV, ENTRYPOINT and CMD stop the script with a line naming them.
#
# Then infra/docker/check_training_image.sh checks the image (a few minutes; --no-check skips it).
#
# Caching: the debootstrap tarball and pip's downloads (the GPU set is several GB) are kept under
# $RLRUN_CACHE_DIR, so a rebuild downloads nothing again. The image carries a label with a hash
# of the Dockerfile and of everything it copies; when an image of that tag with the same hash
# exists, the build is skipped (only the checks run).
#
# Usage: bash infra/docker/build_training_image.sh [--force] [--no-check] [--print]
#   --force      rebuild even if an up-to-date image exists (the cached tarball is kept)
#   --no-check   build only
#   --print      print the Dockerfile's instructions as this script reads them, and stop
# Env:
#   RLRUN_TRAINING_IMAGE  image tag (default rlrun:<version in pyproject.toml>)
#   RLRUN_CACHE_DIR       rootfs tarball, pip cache, build directory (default /var/cache/rlrun)
#   RLRUN_DEBIAN_MIRROR   Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   RLRUN_PIP_CERT        CA bundle pip uses during the build (default: $PIP_CERT, else the
#                         system bundle if present); it is not left in the image
# Needs root (debootstrap, chroot) and a Docker daemon (infra/docker/start_dockerd.sh).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dockerfile="$repo/infra/docker/training/Dockerfile"
version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$repo/pyproject.toml" | head -n 1)"
image="${RLRUN_TRAINING_IMAGE:-rlrun:${version:-latest}}"
cache_dir="${RLRUN_CACHE_DIR:-/var/cache/rlrun}"
mirror="${RLRUN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
base_tarball="$cache_dir/training-base-bookworm.tar"
pip_cache="$cache_dir/pip"
# RUN's PATH in a debian image, before any ENV.
default_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

force=0
check=1
print=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        --no-check) check=0 ;;
        --print) print=1 ;;
        *) echo "build_training_image: unknown option $arg (--force, --no-check, --print)" >&2; exit 2 ;;
    esac
done

say() { echo "build_training_image: $*"; }
die() { echo "build_training_image: $*" >&2; exit 1; }

# The Dockerfile's instructions, one per line: comments and blank lines dropped, continuation
# lines joined.
instructions() {
    local line buf=""
    while IFS= read -r line || [ -n "$line" ]; do
        if [ -z "$buf" ] && { [[ "$line" =~ ^[[:space:]]*# ]] || [[ -z "${line//[[:space:]]/}" ]]; }; then
            continue
        fi
        if [[ "$line" == *\\ ]]; then
            buf+="${line%\\} "
            continue
        fi
        printf '%s\n' "$buf$line"
        buf=""
    done <"$dockerfile"
}

# Every COPY source, for the inputs hash.
copy_sources() {
    local keyword rest
    while read -r keyword rest; do
        if [ "${keyword^^}" = COPY ]; then
            # shellcheck disable=SC2086  # the sources are plain words
            set -- $rest
            while [ $# -gt 1 ]; do echo "$1"; shift; done
        fi
    done < <(instructions)
}

inputs_hash() {
    local sources
    mapfile -t sources < <(copy_sources | sort -u)
    (cd "$repo" && tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
        --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' \
        -cf - infra/docker/training/Dockerfile "${sources[@]}") | sha256sum | cut -c1-16
}

# Refuse what this script cannot carry out before anything is built.
env_form='^[A-Za-z_][A-Za-z0-9_]*=[^[:space:]"$'"'"']*$'
while IFS= read -r instruction; do
    keyword="${instruction%%[[:space:]]*}"
    rest="${instruction#"$keyword"}"
    rest="${rest#"${rest%%[![:space:]]*}"}"
    case "${keyword^^}" in
        FROM) [ "$rest" = "debian:bookworm-slim" ] \
            || die "the Dockerfile's base is '$rest'; this script makes only debian:bookworm-slim" ;;
        ENV) [[ "$rest" =~ $env_form ]] \
            || die "ENV '$rest': this script takes one KEY=VALUE per ENV line, unquoted, without \$" ;;
        RUN) [[ "$rest" == \[* ]] && die "RUN $rest: only the shell form is supported here" ;;
        COPY) [[ "$rest" == --* ]] && die "COPY $rest: options are not supported here" ;;
        WORKDIR | ENTRYPOINT | CMD) ;;
        *) die "the Dockerfile's $keyword instruction is not one this script carries out; build with docker build" ;;
    esac
    [ "$print" = 1 ] && printf '%s %s\n' "${keyword^^}" "$rest"
done < <(instructions)
[ "$print" = 1 ] && exit 0

docker info >/dev/null 2>&1 || die "no docker daemon answers; run infra/docker/start_dockerd.sh first"

started=$SECONDS
hash="$(inputs_hash)"
current="$(docker image inspect --format '{{ index .Config.Labels "rlrun.inputs" }}' "$image" 2>/dev/null || true)"
if [ "$force" = 0 ] && [ "$current" = "$hash" ]; then
    say "$image is up to date (inputs $hash); not rebuilding"
else
    [ "$(id -u)" -eq 0 ] || die "debootstrap and chroot need root; run as root"
    mkdir -p "$cache_dir" "$pip_cache"

    # 1. The base: debian:bookworm-slim's equivalent, made offline once and cached.
    if [ ! -s "$base_tarball" ]; then
        if ! command -v debootstrap >/dev/null 2>&1; then
            say "installing debootstrap"
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq
            apt-get install -y -qq debootstrap >/dev/null
        fi
        base="$(mktemp -d "$cache_dir/base.XXXXXX")"
        say "debootstrap bookworm (minbase) into $base"
        debootstrap --variant=minbase bookworm "$base" "$mirror" \
            >"$cache_dir/debootstrap-training.log" 2>&1 || {
            tail -n 20 "$cache_dir/debootstrap-training.log" >&2
            rm -rf --one-file-system "$base"
            die "debootstrap failed; last lines of $cache_dir/debootstrap-training.log above"
        }
        rm -rf "$base"/var/cache/apt/archives/*.deb "$base"/var/lib/apt/lists/*
        tar --numeric-owner -C "$base" -cf "$base_tarball.tmp" .
        mv "$base_tarball.tmp" "$base_tarball"
        rm -rf --one-file-system "$base"
    fi

    # 2. The Dockerfile's instructions on a copy of the base.
    rootfs="$(mktemp -d "$cache_dir/training-rootfs.XXXXXX")"
    cleanup() {
        local m
        for m in "$rootfs/var/cache/rlrun-pip" "$rootfs/proc"; do
            if mountpoint -q "$m" 2>/dev/null; then umount "$m" || umount -l "$m"; fi
        done
        # Never delete through a mount that is still there.
        if ! grep -q " $rootfs/" /proc/mounts; then
            rm -rf --one-file-system "$rootfs"
        else
            echo "build_training_image: $rootfs still has mounts; left in place" >&2
        fi
    }
    trap cleanup EXIT
    trap 'exit 130' INT TERM  # through the EXIT trap: mounts undone, the build directory removed
    tar --numeric-owner -C "$rootfs" -xf "$base_tarball"
    cp -L /etc/resolv.conf "$rootfs/etc/resolv.conf"
    pip_cert="${RLRUN_PIP_CERT:-${PIP_CERT:-}}"
    [ -z "$pip_cert" ] && [ -s /etc/ssl/certs/ca-certificates.crt ] && pip_cert=/etc/ssl/certs/ca-certificates.crt
    build_env=("HOME=/root" "PIP_CACHE_DIR=/var/cache/rlrun-pip")
    if [ -n "$pip_cert" ]; then
        cp -L "$pip_cert" "$rootfs/tmp/build-ca.pem"
        build_env+=("PIP_CERT=/tmp/build-ca.pem" "SSL_CERT_FILE=/tmp/build-ca.pem")
    fi
    mount -t proc proc "$rootfs/proc"
    mkdir -p "$rootfs/var/cache/rlrun-pip"
    mount --bind "$pip_cache" "$rootfs/var/cache/rlrun-pip"

    workdir=/
    image_env=()    # KEY=VALUE, in order: the image's, and every later RUN's
    changes=()      # docker import --change
    n=0
    while IFS= read -r instruction; do
        n=$((n + 1))
        keyword="${instruction%%[[:space:]]*}"
        rest="${instruction#"$keyword"}"
        rest="${rest#"${rest%%[![:space:]]*}"}"
        case "${keyword^^}" in
            FROM) ;;  # the base made above
            WORKDIR)
                case "$rest" in /*) workdir="$rest" ;; *) workdir="$workdir/$rest" ;; esac
                mkdir -p "$rootfs$workdir"
                changes+=("WORKDIR $workdir")
                ;;
            ENV)
                image_env+=("$rest")
                changes+=("ENV $rest")
                ;;
            ENTRYPOINT | CMD)
                changes+=("${keyword^^} $rest")
                ;;
            COPY)
                # shellcheck disable=SC2086
                set -- $rest
                [ $# -ge 2 ] || die "COPY '$rest' needs a source and a destination"
                args=("$@")
                dest="${args[-1]}"
                unset 'args[-1]'
                case "$dest" in /*) ;; *) dest="$workdir/$dest" ;; esac
                for src in "${args[@]}"; do
                    [ -e "$repo/$src" ] || die "COPY $src: not in $repo"
                    if [ -d "$repo/$src" ]; then  # a directory's contents, as docker copies them
                        mkdir -p "$rootfs$dest"
                        tar -C "$repo/$src" --exclude=__pycache__ --exclude='*.pyc' \
                            --exclude='*.egg-info' -cf - . | tar -C "$rootfs$dest" -xf -
                    elif [[ "$dest" == */ ]] || [ "${#args[@]}" -gt 1 ]; then
                        mkdir -p "$rootfs$dest"
                        cp "$repo/$src" "$rootfs$dest/"
                    else
                        mkdir -p "$(dirname "$rootfs$dest")"
                        cp "$repo/$src" "$rootfs$dest"
                    fi
                done
                ;;
            RUN)
                say "step $n: RUN $rest"
                path="$default_path"
                for kv in "${image_env[@]}"; do [[ "$kv" == PATH=* ]] && path="${kv#PATH=}"; done
                chroot "$rootfs" /usr/bin/env -i "PATH=$path" "${build_env[@]}" "${image_env[@]}" \
                    /bin/sh -c "cd '$workdir' && $rest" \
                    || die "step $n failed: RUN $rest"
                ;;
        esac
    done < <(instructions)

    umount "$rootfs/var/cache/rlrun-pip" "$rootfs/proc"
    rm -rf "$rootfs/tmp/build-ca.pem" "$rootfs/var/cache/rlrun-pip" "$rootfs/root/.cache"
    : >"$rootfs/etc/resolv.conf"  # docker provides its own at run time

    import_args=()
    for c in "${changes[@]}"; do import_args+=(--change "$c"); done
    import_args+=(--change "LABEL rlrun.inputs=$hash")
    say "importing the root file system as $image"
    previous="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
    tar --numeric-owner --one-file-system -C "$rootfs" -cf - . \
        | docker import "${import_args[@]}" - "$image" >/dev/null
    # The image this one replaces is 11 GB of untagged layers now (kept if a container or
    # another tag still uses it).
    if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect --format '{{.Id}}' "$image")" ]; then
        docker rmi "$previous" >/dev/null 2>&1 || true
    fi
    cleanup
    trap - EXIT
    say "$image built in $((SECONDS - started)) s ($(docker image inspect --format '{{.Size}}' "$image" | awk '{printf "%.2f GB", $1 / 1e9}'))"
fi

if [ "$check" = 1 ]; then
    bash "$repo/infra/docker/check_training_image.sh" "$image"
fi
