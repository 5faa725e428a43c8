#!/usr/bin/env bash
# Build the sandbox image (rlrun-sandbox:latest) without a container registry: debootstrap a
# minimal Debian bookworm root with python3 and g++, add the non-root `sandbox` user, and
# `docker import` it. The result matches infra/docker/sandbox/Dockerfile, which is the way to
# build it where a registry can be reached.
#
# The root filesystem tarball is cached under $RLRUN_CACHE_DIR, so a rerun on the same machine
# only re-imports it (seconds). When the image already exists the script does nothing.
#
# Usage: bash infra/docker/build_sandbox_image.sh [--force]
#   --force      rebuild the root filesystem and re-import even if image and cache exist
# Env:
#   RLRUN_SANDBOX_IMAGE  image tag (default rlrun-sandbox:latest)
#   RLRUN_CACHE_DIR      where the rootfs tarball is kept (default /var/cache/rlrun)
#   RLRUN_DEBIAN_MIRROR  Debian mirror for debootstrap (default http://deb.debian.org/debian)
set -euo pipefail

image="${RLRUN_SANDBOX_IMAGE:-rlrun-sandbox:latest}"
cache_dir="${RLRUN_CACHE_DIR:-/var/cache/rlrun}"
mirror="${RLRUN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# Keep in step with the Dockerfile: the executor needs python3 (full stdlib, as solutions
# import heapq, fractions, decimal...) and g++ for C++17.
packages="python3,g++"
sandbox_uid=1000
tarball="$cache_dir/sandbox-rootfs-bookworm.tar"
force=0
[ "${1:-}" = "--force" ] && force=1

if ! docker info >/dev/null 2>&1; then
    echo "build_sandbox_image: no docker daemon answers; run infra/docker/start_dockerd.sh first" >&2
    exit 1
fi

if [ "$force" = 0 ] && docker image inspect "$image" >/dev/null 2>&1; then
    echo "build_sandbox_image: $image already present"
    exit 0
fi

if [ "$force" = 1 ] || [ ! -s "$tarball" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "build_sandbox_image: debootstrap needs root; run as root" >&2
        exit 1
    fi
    if ! command -v debootstrap >/dev/null 2>&1; then
        echo "build_sandbox_image: installing debootstrap"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq debootstrap >/dev/null
    fi
    mkdir -p "$cache_dir"
    rootfs="$(mktemp -d "$cache_dir/rootfs.XXXXXX")"
    trap 'rm -rf "$rootfs" "$tarball.tmp"' EXIT
    echo "build_sandbox_image: debootstrap bookworm ($packages) into $rootfs"
    debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" \
        >"$cache_dir/debootstrap.log" 2>&1 || {
        echo "build_sandbox_image: debootstrap failed; last lines of $cache_dir/debootstrap.log:" >&2
        tail -n 20 "$cache_dir/debootstrap.log" >&2
        exit 1
    }
    chroot "$rootfs" useradd --create-home --uid "$sandbox_uid" --shell /usr/sbin/nologin sandbox
    # Package caches and lists only make the image bigger; the image never runs apt.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
        "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
    tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
fi

echo "build_sandbox_image: importing $tarball as $image"
docker import \
    --change "USER $sandbox_uid:$sandbox_uid" \
    --change "WORKDIR /home/sandbox" \
    --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "ENV LANG=C.UTF-8" \
    --change 'CMD ["python3"]' \
    - "$image" <"$tarball" >/dev/null
docker run --rm --network none "$image" python3 -c "import sys; print('python', sys.version.split()[0])"
docker run --rm --network none "$image" g++ --version | head -n 1
echo "build_sandbox_image: $image ready"
