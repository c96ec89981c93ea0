#!/usr/bin/env bash
# Make this machine able to build and run plangate's image with podman (issue 12).
# Idempotent: installs only what is missing and rewrites nothing that is already right.
#
#   bash .ci/container-setup.sh
#
# What these CI machines need (see docker/README.md, "Podman on the CI machines"):
#   - Debian's podman + runc (crun refuses the machine's hybrid cgroups), debootstrap
#     for the stand-in base images, podman-compose for docker/compose.yaml;
#   - /etc/containers/containers.conf: runc, cgroupfs, file event log, and no default
#     ulimits (they cannot be set here). Every build and run uses --network=host:
#     there is no bridge networking.
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for tool in podman:podman runc:runc debootstrap:debootstrap podman-compose:podman-compose; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
done
if (( ${#missing[@]} )); then
    echo "installing with apt: ${missing[*]}"
    as_root apt-get update -q
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends \
        "${missing[@]}" uidmap fuse-overlayfs slirp4netns
fi

CONF=/etc/containers/containers.conf
WANT='# Written by plangate .ci/container-setup.sh (issue 12).
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"'
if [[ "$(cat "$CONF" 2>/dev/null)" != "$WANT" ]]; then
    as_root mkdir -p /etc/containers
    printf '%s\n' "$WANT" | as_root tee "$CONF" >/dev/null
    echo "wrote $CONF"
fi

podman --version
runc --version | head -n 1
podman-compose --version 2>/dev/null | grep -i 'podman-compose version' || true
# A smoke test of the engine itself (no image needed): fails here, not mid-test.
podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}} {{.Store.GraphDriverName}}'
