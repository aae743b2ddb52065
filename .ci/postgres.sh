#!/usr/bin/env bash
# A local PostgreSQL for `ablate search --storage postgresql://...` and the `postgres` tests. Idempotent: installs
# Debian's postgresql when it is missing, creates and starts a cluster listening on localhost, creates a user
# and a database, and prints the URL (the only line on stdout):
#   export ABLATE_TEST_POSTGRES_URL=$(.ci/postgres.sh)
#   pytest tests/test_search_optuna.py -m postgres
# Settings (environment): ABLATE_PG_USER (ablate), ABLATE_PG_PASSWORD (ablate), ABLATE_PG_DB (ablate_optuna),
# ABLATE_PG_PORT (5432, used when a cluster is created), ABLATE_PG_CLUSTER (main).
# Python side: optuna's RDBStorage needs psycopg2 (pip install psycopg2-binary).
set -euo pipefail
user=${ABLATE_PG_USER:-ablate}
password=${ABLATE_PG_PASSWORD:-ablate}
db=${ABLATE_PG_DB:-ablate_optuna}
port=${ABLATE_PG_PORT:-5432}
cluster=${ABLATE_PG_CLUSTER:-main}

say() { echo "postgres.sh: $*" >&2; }
if [ "$(id -u)" = 0 ]; then
  as_root() { "$@"; }
  as_postgres() { runuser -u postgres -- "$@"; }
else
  as_root() { sudo "$@"; }
  as_postgres() { sudo -u postgres "$@"; }
fi

installed_version() { ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -1; }
if ! command -v pg_ctlcluster >/dev/null 2>&1 || [ -z "$(installed_version)" ] \
   || [ ! -x "/usr/lib/postgresql/$(installed_version)/bin/initdb" ]; then
  say "installing Debian's postgresql"
  as_root apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
version=$(installed_version)

if ! pg_lsclusters -h | awk -v v="$version" -v c="$cluster" '$1 == v && $2 == c {found = 1} END {exit !found}'; then
  say "creating cluster $version/$cluster on port $port"
  as_root pg_createcluster "$version" "$cluster" --port "$port" >&2
fi
port=$(pg_lsclusters -h | awk -v v="$version" -v c="$cluster" '$1 == v && $2 == c {print $3}')
status=$(pg_lsclusters -h | awk -v v="$version" -v c="$cluster" '$1 == v && $2 == c {print $4}')
if [ "$status" != online ]; then
  say "starting cluster $version/$cluster on port $port"
  as_root pg_ctlcluster "$version" "$cluster" start >&2  # no systemd needed (containers, CI)
fi
for _ in $(seq 1 30); do
  as_postgres pg_isready -q -h localhost -p "$port" && break
  sleep 1
done
as_postgres pg_isready -q -h localhost -p "$port" || { say "cluster did not come up on localhost:$port"; exit 1; }

psql_admin() { as_postgres psql -X -q -v ON_ERROR_STOP=1 -p "$port" "$@"; }
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$user'")" != 1 ]; then
  say "creating user $user"
  psql_admin -c "CREATE ROLE \"$user\" LOGIN PASSWORD '$password'" >&2
else
  psql_admin -c "ALTER ROLE \"$user\" LOGIN PASSWORD '$password'" >&2
fi
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'")" != 1 ]; then
  say "creating database $db"
  psql_admin -c "CREATE DATABASE \"$db\" OWNER \"$user\"" >&2
fi
url="postgresql://$user:$password@localhost:$port/$db"
PGPASSWORD=$password psql -X -q -h localhost -p "$port" -U "$user" -d "$db" -tAc "SELECT 1" >/dev/null \
  || { say "cannot log in as $user over TCP (check pg_hba.conf)"; exit 1; }
echo "$url"
