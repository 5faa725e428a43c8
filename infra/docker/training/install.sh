#!/usr/bin/env bash
# What goes into the rlrun training image, in one place. Both ways of building the image run it:
# infra/docker/training/Dockerfile (one RUN per step, so Docker caches the dependencies apart
# from the code) and infra/docker/build_training_image.sh (the same steps in a chroot of a
# Debian 12 root file system made with debootstrap, for machines without a container registry).
#
# Usage: bash infra/docker/training/install.sh STEP...   (as root, from /opt/rlrun)
#   system  Debian 12 packages: python3 (3.11), python3-venv, g++ (the sandbox's C++ tests run
#           in-process in this image), and a virtual environment in $RLRUN_VENV (Debian's own
#           python3 refuses `pip install` into the system, PEP 668), first on login shells' PATH
#   deps    the GPU dependency set (vLLM and the CUDA builds of torch) into the environment, as
#           pinned by infra/docker/constraints-gpu.txt, from pyproject.toml with the packages
#           left empty, so that a change to the code does not reinstall them
#   rlrun   rlrun itself (rlrun/, actors/, infra/), no dependencies
#   clean   drop what only the build needed (apt lists, docs, man pages)
# Env:
#   RLRUN_VENV      the virtual environment (default /opt/venv; the Dockerfile puts its bin/ first
#                   on PATH)
#   PIP_CACHE_DIR   set: pip keeps its downloads there (the offline build script uses it so a
#                   rebuild does not fetch the GPU set again); unset: no pip cache in the image
set -euo pipefail

venv="${RLRUN_VENV:-/opt/venv}"
constraints="infra/docker/constraints-gpu.txt"
# Debian 12's versions, pinned so that both builds install the same.
apt_packages=("python3=3.11.2-1+b1" "python3-venv=3.11.2-1+b1" "g++=4:12.2.0-3")

pip_install() {
    local cache=(--no-cache-dir)
    [ -n "${PIP_CACHE_DIR:-}" ] && cache=()
    "$venv/bin/pip" install --disable-pip-version-check --progress-bar off "${cache[@]}" "$@"
}

step_system() {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${apt_packages[@]}"
    python3 -m venv "$venv"
    # The Dockerfile puts $venv/bin first on PATH, but a login shell (KubeRay starts Ray with
    # `bash -lc`) resets PATH in /etc/profile, which then reads this.
    echo "export PATH=\"$venv/bin:\$PATH\"" >/etc/profile.d/rlrun-venv.sh
}

step_deps() {
    [ -f pyproject.toml ] && [ -f "$constraints" ] || {
        echo "install.sh deps: run from the directory holding pyproject.toml and $constraints" >&2
        exit 1
    }
    # The project with empty packages: its dependencies resolve, its code is not needed yet.
    mkdir -p rlrun actors infra
    for pkg in rlrun actors infra; do
        [ -e "$pkg/__init__.py" ] || touch "$pkg/__init__.py"
    done
    pip_install -c "$constraints" '.[vllm]'
    "$venv/bin/pip" uninstall -y rlrun
}

step_rlrun() {
    pip_install --no-deps -c "$constraints" .
    rm -rf build rlrun.egg-info
}

step_clean() {
    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /usr/share/doc/* /usr/share/man/*
}

[ $# -gt 0 ] || { echo "usage: install.sh system|deps|rlrun|clean ..." >&2; exit 2; }
for step in "$@"; do
    case "$step" in
        system | deps | rlrun | clean) "step_$step" ;;
        *) echo "install.sh: unknown step '$step' (system, deps, rlrun, clean)" >&2; exit 2 ;;
    esac
done
