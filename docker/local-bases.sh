#!/usr/bin/env bash
# Stand-ins for the public base images docker/Dockerfile names, for machines that
# reach Debian's package archive but no container registry (the CI machines; see
# docker/README.md). With a registry, none of this is needed: `podman build` or
# `docker build` pulls the real images.
#
#   bash docker/local-bases.sh          # skips every image that already exists
#
# Builds, under the exact names the Dockerfile resolves to:
#   docker.io/library/debian:bookworm-slim    debootstrap --variant=minbase bookworm,
#       slimmed the way the public image is (no docs, man pages or locales; dpkg
#       excludes them from later installs; apt keeps no package cache or lists);
#   docker.io/library/rust:1.95-slim-bookworm that root filesystem plus gcc, libc6-dev,
#       ca-certificates (what the public image adds), this machine's Rust 1.95
#       toolchain (bin/ and lib/, not its docs) and this machine's CA bundle, so
#       cargo can reach the crate registry;
# Needs root (debootstrap), podman set up by .ci/container-setup.sh, and the
# Rust 1.95 toolchain (rustup) on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_IMAGE=docker.io/library/debian:bookworm-slim
RUST_IMAGE=docker.io/library/rust:1.95-slim-bookworm
RUST_TOOLCHAIN=1.95.0-x86_64-unknown-linux-gnu
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

have() { podman image exists "$1"; }
step() { printf '== %s\n' "$*"; }

WORK=
cleanup() { if [[ -n "$WORK" ]]; then rm -rf "$WORK"; fi; }
trap cleanup EXIT

if have "$DEBIAN_IMAGE"; then
    step "$DEBIAN_IMAGE exists: skipped"
else
    step "$DEBIAN_IMAGE: debootstrap --variant=minbase bookworm ($MIRROR)"
    WORK=$(mktemp -d /var/tmp/plangate-bases.XXXXXX)
    ROOT="$WORK/rootfs"
    debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
        { tail -n 30 "$WORK/debootstrap.log"; exit 1; }
    # What the public slim image carries (docker-library/debian's debuerreotype
    # settings): dpkg leaves out docs, man pages and locales on every later install...
    cat >"$ROOT/etc/dpkg/dpkg.cfg.d/docker" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
CFG
    # ...and apt keeps no downloaded package or cache in the layer that ran it.
    cat >"$ROOT/etc/apt/apt.conf.d/docker-clean" <<'CFG'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CFG
    cat >"$ROOT/etc/apt/apt.conf.d/docker-autoremove-suggests" <<'CFG'
Apt::AutoRemove::SuggestsImportant "false";
CFG
    cat >"$ROOT/etc/apt/apt.conf.d/docker-no-languages" <<'CFG'
Acquire::Languages "none";
CFG
    cat >"$ROOT/etc/apt/apt.conf.d/docker-gzip-indexes" <<'CFG'
Acquire::GzipIndexes "true";
CFG
    # The public image's sources: bookworm, its updates and security.
    rm -f "$ROOT/etc/apt/sources.list"
    cat >"$ROOT/etc/apt/sources.list.d/debian.sources" <<'CFG'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
CFG
    # Remove what the exclusions would have kept out, and the bootstrap's leftovers.
    find "$ROOT/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$ROOT/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$ROOT"/usr/share/{groff,info,linda,lintian/overrides,locale,man}/* \
        "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/apt/archives/*.deb \
        "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/log/* "$ROOT"/var/cache/debconf/*-old \
        "$ROOT"/etc/hostname "$ROOT"/etc/resolv.conf
    tar --numeric-owner --xattrs -C "$ROOT" -c . |
        podman import --change 'CMD ["bash"]' - "$DEBIAN_IMAGE" >/dev/null
    rm -rf "$WORK"; WORK=
fi
podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$DEBIAN_IMAGE"

if have "$RUST_IMAGE"; then
    step "$RUST_IMAGE exists: skipped"
else
    step "$RUST_IMAGE: $DEBIAN_IMAGE + gcc, libc6-dev, ca-certificates + Rust 1.95"
    # Any installed rustup toolchain that is Rust 1.95 (1.95.0, stable, ...).
    TOOLCHAIN=
    for dir in "${RUSTUP_HOME:-$HOME/.rustup}"/toolchains/*-x86_64-unknown-linux-gnu; do
        if [[ -x "$dir/bin/cargo" ]] && "$dir/bin/rustc" --version | grep -q '^rustc 1\.95\.'; then
            TOOLCHAIN=$dir
            break
        fi
    done
    [[ -n "$TOOLCHAIN" ]] || { echo "no Rust 1.95 toolchain under ${RUSTUP_HOME:-$HOME/.rustup}/toolchains" >&2; exit 1; }
    WORK=$(mktemp -d /var/tmp/plangate-bases.XXXXXX)
    mkdir -p "$WORK/toolchain"
    # bin/ and lib/ only: share/ is documentation (about 800 MB).
    cp -a "$TOOLCHAIN/bin" "$TOOLCHAIN/lib" "$WORK/toolchain/"
    cp -L /etc/ssl/certs/ca-certificates.crt "$WORK/ca-certificates.crt"
    # The public image's layout: RUSTUP_HOME=/usr/local/rustup, CARGO_HOME=/usr/local/cargo
    # with the tools on PATH (here links to the toolchain instead of rustup's proxies).
    cat >"$WORK/Containerfile" <<CFG
FROM $DEBIAN_IMAGE
ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo \\
    PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    RUST_VERSION=1.95.0
RUN apt-get update \\
    && apt-get install -y --no-install-recommends ca-certificates gcc libc6-dev \\
    && rm -rf /var/lib/apt/lists/*
COPY toolchain /usr/local/rustup/toolchains/$RUST_TOOLCHAIN
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
RUN mkdir -p /usr/local/cargo/bin \\
    && for tool in cargo rustc rustdoc; do \\
         ln -s /usr/local/rustup/toolchains/$RUST_TOOLCHAIN/bin/\$tool /usr/local/cargo/bin/\$tool; \\
       done \\
    && chmod -R a+w /usr/local/cargo \\
    && cargo --version && rustc --version
CFG
    podman build --network=host -q -t "$RUST_IMAGE" -f "$WORK/Containerfile" "$WORK" >/dev/null
    rm -rf "$WORK"; WORK=
fi
podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$RUST_IMAGE"
