#!/usr/bin/env bash
# What the test suite needs on a fresh Debian/Ubuntu machine, set up idempotently:
# PostgreSQL on 127.0.0.1:5432 accepting the `postgres` user over TCP without a
# password (installed with apt and started if missing), and cargo-nextest.
# `.ci/run` calls it too, so CI and a newcomer's machine are set up alike.
#   bash .ci/test-env.sh && cargo nextest run --locked
set -euo pipefail
cd "$(dirname "$0")/.."

PG_URL="${PLANGATE_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  echo "PostgreSQL is missing: installing it with apt"
  as_root apt-get update -q
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q postgresql
fi
PG_VERSION=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
if [ -z "$PG_VERSION" ]; then
  PG_VERSION=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
  as_root pg_createcluster "$PG_VERSION" main
fi
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  as_root pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" main start || true
fi
for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
pg_isready -h 127.0.0.1 -p 5432
# The tests connect over TCP as postgres with trust auth; a fresh install uses
# scram for TCP, so allow loopback trust once (idempotent).
if ! psql "$PG_URL" -Atqc 'select 1' >/dev/null 2>&1; then
  HBA="/etc/postgresql/$PG_VERSION/main/pg_hba.conf"
  if ! as_root grep -q 'plangate-ci' "$HBA"; then
    as_root sed -i '1i host all all 127.0.0.1/32 trust # plangate-ci\nhost all all ::1/128 trust # plangate-ci' "$HBA"
  fi
  as_root pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" main reload
  sleep 1
fi
psql "$PG_URL" -Atqc 'select version()'

echo "== cargo-nextest"
cargo --version
if ! command -v cargo-nextest >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi
cargo nextest --version
