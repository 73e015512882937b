#!/usr/bin/env bash
# Real PostgreSQL and MariaDB servers for the pal-slurm database tests.
#
# Usage: tests/services/db-servers.sh {install|start|stop|restart|status|env}
#
#   install  apt-get install the server/client packages that are missing
#            (Debian 12 bookworm and Debian 13 trixie; needs root or sudo -n)
#   start    create (once) and start both servers on 127.0.0.1; idempotent
#   stop     stop both servers; idempotent
#   restart  stop, then start
#   status   say whether each server answers (exit 0 only if both do)
#   env      print the `export PAL_TEST_..._URL=...` lines (use with eval): the pal user's URLs and
#            the administrators' (unix socket) URLs
#
# Typical use:
#   tests/services/db-servers.sh install
#   tests/services/db-servers.sh start
#   eval "$(tests/services/db-servers.sh env)"
#
# Environment:
#   PAL_TEST_DB_DIR        state dir (data, sockets, logs); default /var/tmp/pal-test-db
#   PAL_TEST_PG_PORT       PostgreSQL TCP port; default 15432 (below the kernel's ephemeral ports, 32768-60999,
#                          which outgoing connections may hold at the moment a server binds)
#   PAL_TEST_MYSQL_PORT    MariaDB TCP port;    default 13306
#   PAL_TEST_DB_WAIT       seconds to wait for a server to answer; default 60
#
# Both servers keep their data directories under the state dir, created by this
# script (initdb / mariadb-install-db); clusters created by the Debian packages
# are neither used nor touched.  They listen on 127.0.0.1 only, and are tuned
# for tests, not durability (fsync off etc.).  Each gets a user `pal` with
# password `paltest` and a database `pal_test` (PostgreSQL: owned by pal, and pal
# may CREATEDB; MariaDB: ALL on pal_test.* and on pal\_test\_%.* so tests can
# create and drop throwaway databases named pal_test_<something>).
#
# Progress goes to stderr; on failure the script exits non-zero with a one-line
# reason ("db-servers: error: ...").

set -euo pipefail

PROG="db-servers"
STATE_DIR="${PAL_TEST_DB_DIR:-/var/tmp/pal-test-db}"
PG_PORT="${PAL_TEST_PG_PORT:-15432}"
MY_PORT="${PAL_TEST_MYSQL_PORT:-13306}"
WAIT_S="${PAL_TEST_DB_WAIT:-60}"
DB_USER="pal"
DB_PASS="paltest"
DB_NAME="pal_test"
PG_OS_USER="postgres"
MY_OS_USER="mysql"

# shellcheck source=tests/services/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

case "$PG_PORT" in '' | *[!0-9]*) die "PAL_TEST_PG_PORT must be a number, got '$PG_PORT'" ;; esac
case "$MY_PORT" in '' | *[!0-9]*) die "PAL_TEST_MYSQL_PORT must be a number, got '$MY_PORT'" ;; esac
case "$WAIT_S" in '' | *[!0-9]*) die "PAL_TEST_DB_WAIT must be a number, got '$WAIT_S'" ;; esac
case "$STATE_DIR" in
    /*) ;;
    *) STATE_DIR="$(pwd)/$STATE_DIR" ;;
esac

# Layout under the state dir.
PG_DATA="$STATE_DIR/postgres/data"
PG_SOCK_DIR="$STATE_DIR/postgres/run"
PG_LOG="$STATE_DIR/postgres/postgres.log"
MY_DATA="$STATE_DIR/mariadb/data"
MY_RUN_DIR="$STATE_DIR/mariadb/run"
MY_SOCK="$MY_RUN_DIR/mariadbd.sock"
MY_PID_FILE="$MY_RUN_DIR/mariadbd.pid"
MY_LOG="$STATE_DIR/mariadb/mariadb.log"

IS_ROOT=0
if [ "$(id -u)" -eq 0 ]; then IS_ROOT=1; fi
# MariaDB admin account, authenticated by unix_socket (OS user = account):
# root when run as root, else an account named after the OS user, made by
# mariadb-install-db --auth-root-socket-user.
MY_ADMIN_USER="root"
if [ "$IS_ROOT" -ne 1 ]; then MY_ADMIN_USER="$(id -un)"; fi

# ---------------------------------------------------------------- helpers

# Newest PostgreSQL installed as /usr/lib/postgresql/<major>/bin.
pg_bindir() {
    local d best=""
    for d in /usr/lib/postgresql/*/bin; do
        [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] || continue
        best="$(printf '%s\n%s\n' "$best" "$d" | sed '/^$/d' | sort -V | tail -n 1)"
    done
    [ -n "$best" ] || return 1
    printf '%s\n' "$best"
}

# Run a command as the postgres OS user (as ourselves when not root), from /
# so that it never trips over an unreadable working directory.
as_pg() {
    if [ "$IS_ROOT" -eq 1 ]; then
        (cd / && runuser -u "$PG_OS_USER" -- "$@")
    else
        (cd / && "$@")
    fi
}

require_os_user() {
    id -u "$1" >/dev/null 2>&1 || die "OS user '$1' does not exist (run '$0 install' first)"
}

# Create a directory owned by $2 (when root) with mode $3.
mkdir_owned() {
    local dir="$1" owner="$2" mode="$3"
    mkdir -p "$dir"
    if [ "$IS_ROOT" -eq 1 ]; then chown "$owner:" "$dir"; fi
    chmod "$mode" "$dir"
}

make_state_dir() {
    mkdir -p "$STATE_DIR" || die "cannot create state dir $STATE_DIR"
    chmod 755 "$STATE_DIR"
}

# ---------------------------------------------------------------- install

cmd_install() {
    local pkgs=()
    if ! pg_bindir >/dev/null; then pkgs+=(postgresql); fi
    if ! have psql && ! find_cmd psql >/dev/null; then pkgs+=(postgresql-client); fi
    if ! find_cmd mariadbd mysqld >/dev/null || ! find_cmd mariadb-install-db mysql_install_db >/dev/null; then
        pkgs+=(mariadb-server)
    fi
    if ! find_cmd mariadb mysql >/dev/null || ! find_cmd mariadb-admin mysqladmin >/dev/null; then
        pkgs+=(mariadb-client)
    fi
    if [ "${#pkgs[@]}" -eq 0 ]; then
        log "install: PostgreSQL and MariaDB are already installed"
        return 0
    fi

    apt_install "${pkgs[@]}"
    pg_bindir >/dev/null || die "PostgreSQL installed but no /usr/lib/postgresql/*/bin/initdb found"
    find_cmd mariadbd mysqld >/dev/null || die "MariaDB installed but no mariadbd/mysqld found"
    log "install: done"
}

# ---------------------------------------------------------------- PostgreSQL

pg_bin() {
    local b
    b="$(pg_bindir)" || die "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb; run '$0 install')"
    printf '%s\n' "$b"
}

pg_ctl_running() {
    local bin="$1"
    [ -f "$PG_DATA/PG_VERSION" ] || return 1
    as_pg "$bin/pg_ctl" status -D "$PG_DATA" >/dev/null 2>&1
}

# psql as the superuser over the unix socket (trust auth on local connections).
pg_admin_sql() {
    local bin="$1"; shift
    as_pg env PGCONNECT_TIMEOUT=5 timeout 60 "$bin/psql" -X -q -v ON_ERROR_STOP=1 \
        -h "$PG_SOCK_DIR" -p "$PG_PORT" -U postgres -d postgres "$@"
}

pg_provision() {
    local bin="$1" has_db
    pg_admin_sql "$bin" >/dev/null <<SQL || die "PostgreSQL: could not create role $DB_USER (see $PG_LOG)"
DO \$do\$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '$DB_USER') THEN
        CREATE ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASS';
    ELSE
        ALTER ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASS';
    END IF;
END
\$do\$;
SQL
    has_db="$(pg_admin_sql "$bin" -At -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" ||
        die "PostgreSQL: could not query pg_database"
    if [ "$has_db" != "1" ]; then
        pg_admin_sql "$bin" -c "CREATE DATABASE $DB_NAME OWNER $DB_USER ENCODING 'UTF8' TEMPLATE template0" ||
            die "PostgreSQL: could not create database $DB_NAME"
    else
        pg_admin_sql "$bin" -c "ALTER DATABASE $DB_NAME OWNER TO $DB_USER" ||
            die "PostgreSQL: could not set owner of $DB_NAME"
    fi
}

# Does the pal user get a real answer over TCP?
pg_answers() {
    local bin
    bin="$(pg_bindir)" || return 1
    PGPASSWORD="$DB_PASS" PGCONNECT_TIMEOUT=5 timeout 15 "$bin/psql" -X -q -At \
        -h 127.0.0.1 -p "$PG_PORT" -U "$DB_USER" -d "$DB_NAME" -c 'SELECT 1' 2>/dev/null | grep -qx 1
}

pg_start() {
    local bin
    bin="$(pg_bin)"
    if [ "$IS_ROOT" -eq 1 ]; then require_os_user "$PG_OS_USER"; fi

    # A server of ours that is starting up, shutting down or just died (pid
    # file still there, process a zombie) gets a bounded wait to settle.
    local waited=0
    while pg_ctl_running "$bin"; do
        if pg_answers; then
            log "PostgreSQL: already running on 127.0.0.1:$PG_PORT"
            return 0
        fi
        # Ours is running but pal cannot get in: (re)provision over the socket.
        if pg_admin_sql "$bin" -At -c 'SELECT 1' >/dev/null 2>&1; then
            log "PostgreSQL: running, (re)creating $DB_USER/$DB_NAME"
            pg_provision "$bin"
            pg_answers || die "PostgreSQL: running but $DB_USER cannot log in on 127.0.0.1:$PG_PORT (port changed? run '$0 restart'; see $PG_LOG)"
            return 0
        fi
        if [ "$waited" -ge "$WAIT_S" ]; then
            die "PostgreSQL: server in $PG_DATA is running but does not answer on port $PG_PORT (run '$0 restart'; see $PG_LOG)"
        fi
        if [ "$waited" -eq 0 ]; then log "PostgreSQL: server in $PG_DATA does not answer yet, waiting"; fi
        sleep 1
        waited=$((waited + 1))
    done
    if port_open "$PG_PORT"; then
        die "PostgreSQL: port 127.0.0.1:$PG_PORT is already used by another process (set PAL_TEST_PG_PORT)"
    fi

    make_state_dir
    mkdir_owned "$STATE_DIR/postgres" "$PG_OS_USER" 755
    mkdir_owned "$PG_SOCK_DIR" "$PG_OS_USER" 755
    if [ ! -f "$PG_DATA/PG_VERSION" ]; then
        log "PostgreSQL: initdb ($bin) in $PG_DATA"
        rm -rf "$PG_DATA"
        mkdir_owned "$PG_DATA" "$PG_OS_USER" 700
        as_pg test -w "$PG_DATA" ||
            die "PostgreSQL: user $PG_OS_USER cannot write $PG_DATA (is $STATE_DIR reachable by it?)"
        as_pg "$bin/initdb" -D "$PG_DATA" -U postgres -E UTF8 --no-locale \
            --auth-local=trust --auth-host=scram-sha-256 >"$STATE_DIR/postgres/initdb.log" 2>&1 || {
            tail_log "$STATE_DIR/postgres/initdb.log"
            die "PostgreSQL: initdb failed (see $STATE_DIR/postgres/initdb.log)"
        }
    else
        local have_ver want_ver
        have_ver="$(cat "$PG_DATA/PG_VERSION")"
        want_ver="$(basename "$(dirname "$bin")")"
        if [ "$have_ver" != "$want_ver" ]; then
            die "PostgreSQL: $PG_DATA was made by PostgreSQL $have_ver but $want_ver is installed; stop and remove $STATE_DIR/postgres"
        fi
    fi
    touch "$PG_LOG"
    if [ "$IS_ROOT" -eq 1 ]; then chown "$PG_OS_USER:" "$PG_LOG"; fi

    log "PostgreSQL: starting on 127.0.0.1:$PG_PORT (log $PG_LOG)"
    local opts="-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_SOCK_DIR"
    opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
    # setsid: the postmaster gets its own session, so it outlives the caller's
    # shell and terminal (Ctrl-C in the caller does not reach it).
    if ! as_pg setsid -w "$bin/pg_ctl" start -D "$PG_DATA" -l "$PG_LOG" -w -t "$WAIT_S" -o "$opts" >&2 </dev/null; then
        tail_log "$PG_LOG"
        die "PostgreSQL: did not start within ${WAIT_S}s (see $PG_LOG)"
    fi
    pg_provision "$bin"
    pg_answers || die "PostgreSQL: started but $DB_USER cannot log in on 127.0.0.1:$PG_PORT (see $PG_LOG)"
    log "PostgreSQL: ready"
}

pg_stop() {
    local bin
    if ! bin="$(pg_bindir)"; then
        log "PostgreSQL: not installed, nothing to stop"
        return 0
    fi
    if ! pg_ctl_running "$bin"; then
        log "PostgreSQL: not running"
        return 0
    fi
    log "PostgreSQL: stopping"
    if ! as_pg "$bin/pg_ctl" stop -D "$PG_DATA" -m fast -w -t "$WAIT_S" >&2; then
        as_pg "$bin/pg_ctl" stop -D "$PG_DATA" -m immediate -w -t "$WAIT_S" >&2 ||
            die "PostgreSQL: could not stop the server in $PG_DATA"
    fi
}

# ---------------------------------------------------------------- MariaDB

my_bins() {
    MY_D="$(find_cmd mariadbd mysqld)" || die "MariaDB server not installed (no mariadbd/mysqld; run '$0 install')"
    MY_INSTALL_DB="$(find_cmd mariadb-install-db mysql_install_db)" ||
        die "MariaDB not installed (no mariadb-install-db; run '$0 install')"
    MY_CLIENT="$(find_cmd mariadb mysql)" || die "MariaDB client not installed (run '$0 install')"
    MY_ADMIN="$(find_cmd mariadb-admin mysqladmin)" || die "MariaDB client not installed (no mariadb-admin; run '$0 install')"
}

my_pid() {
    local pid
    [ -s "$MY_PID_FILE" ] || return 1
    pid="$(tr -dc '0-9' <"$MY_PID_FILE")"
    pid_alive "$pid" || return 1
    printf '%s\n' "$pid"
}

# Admin client over the unix socket (unix_socket authentication).
# shellcheck disable=SC2120  # callers may pass client options
my_admin_sql() {
    timeout 60 "$MY_CLIENT" --no-defaults --protocol=socket --socket="$MY_SOCK" -u"$MY_ADMIN_USER" \
        --connect-timeout=5 --batch --skip-column-names "$@"
}

my_ping_socket() {
    timeout 10 "$MY_ADMIN" --no-defaults --protocol=socket --socket="$MY_SOCK" -u"$MY_ADMIN_USER" \
        --connect-timeout=3 ping >/dev/null 2>&1
}

my_provision() {
    # shellcheck disable=SC2119
    my_admin_sql <<SQL || die "MariaDB: could not create user $DB_USER / database $DB_NAME (see $MY_LOG)"
DELETE FROM mysql.global_priv WHERE User = '';
FLUSH PRIVILEGES;
CREATE DATABASE IF NOT EXISTS \`$DB_NAME\` CHARACTER SET utf8mb4;
CREATE USER IF NOT EXISTS '$DB_USER'@'%' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER '$DB_USER'@'%' IDENTIFIED BY '$DB_PASS';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL PRIVILEGES ON \`$DB_NAME\`.* TO '$DB_USER'@'%', '$DB_USER'@'localhost';
GRANT ALL PRIVILEGES ON \`pal\\_test\\_%\`.* TO '$DB_USER'@'%', '$DB_USER'@'localhost';
FLUSH PRIVILEGES;
SQL
}

my_answers() {
    local client
    client="$(find_cmd mariadb mysql)" || return 1
    MYSQL_PWD="$DB_PASS" timeout 15 "$client" --no-defaults --protocol=tcp -h127.0.0.1 -P"$MY_PORT" \
        -u"$DB_USER" --connect-timeout=5 --batch --skip-column-names "$DB_NAME" -e 'SELECT 1' 2>/dev/null |
        grep -qx 1
}

my_start() {
    my_bins
    if [ "$IS_ROOT" -eq 1 ]; then require_os_user "$MY_OS_USER"; fi

    local pid
    if pid="$(my_pid)"; then
        if my_answers; then
            log "MariaDB: already running on 127.0.0.1:$MY_PORT (pid $pid)"
            return 0
        fi
        if my_ping_socket; then
            log "MariaDB: running, (re)creating $DB_USER/$DB_NAME"
            my_provision
            my_answers || die "MariaDB: running but $DB_USER cannot log in on 127.0.0.1:$MY_PORT (port changed? run '$0 restart'; see $MY_LOG)"
            return 0
        fi
        die "MariaDB: server (pid $pid) is running but does not answer (run '$0 restart'; see $MY_LOG)"
    fi
    if port_open "$MY_PORT"; then
        die "MariaDB: port 127.0.0.1:$MY_PORT is already used by another process (set PAL_TEST_MYSQL_PORT)"
    fi

    make_state_dir
    mkdir_owned "$STATE_DIR/mariadb" "$MY_OS_USER" 755
    mkdir_owned "$MY_RUN_DIR" "$MY_OS_USER" 755
    rm -f "$MY_PID_FILE" "$MY_SOCK" "$MY_SOCK.lock"
    local user_opt=()
    if [ "$IS_ROOT" -eq 1 ]; then user_opt=(--user="$MY_OS_USER"); fi

    if [ ! -d "$MY_DATA/mysql" ]; then
        log "MariaDB: $(basename "$MY_INSTALL_DB") in $MY_DATA"
        rm -rf "$MY_DATA"
        mkdir_owned "$MY_DATA" "$MY_OS_USER" 750
        local root_sock_user=()
        if [ "$IS_ROOT" -ne 1 ]; then root_sock_user=(--auth-root-socket-user="$(id -un)"); fi
        (cd / && timeout 300 "$MY_INSTALL_DB" --no-defaults "${user_opt[@]}" --datadir="$MY_DATA" \
            --auth-root-authentication-method=socket "${root_sock_user[@]}" \
            --skip-test-db --skip-name-resolve --innodb-use-native-aio=0 \
            >"$STATE_DIR/mariadb/install-db.log" 2>&1) || {
            tail_log "$STATE_DIR/mariadb/install-db.log"
            rm -rf "$MY_DATA"
            die "MariaDB: $(basename "$MY_INSTALL_DB") failed (see $STATE_DIR/mariadb/install-db.log)"
        }
    fi
    touch "$MY_LOG"
    if [ "$IS_ROOT" -eq 1 ]; then chown "$MY_OS_USER:" "$MY_LOG"; fi

    log "MariaDB: starting $(basename "$MY_D") on 127.0.0.1:$MY_PORT (log $MY_LOG)"
    # setsid + nohup: own session, immune to the caller's SIGHUP/Ctrl-C.
    (
        cd /
        exec setsid nohup "$MY_D" --no-defaults "${user_opt[@]}" \
            --datadir="$MY_DATA" \
            --bind-address=127.0.0.1 --port="$MY_PORT" \
            --socket="$MY_SOCK" --pid-file="$MY_PID_FILE" \
            --log-error="$MY_LOG" \
            --skip-name-resolve \
            --character-set-server=utf8mb4 \
            --max-connections=200 \
            --innodb-use-native-aio=0 \
            --innodb-flush-log-at-trx-commit=2 \
            --innodb-buffer-pool-size=128M \
            </dev/null >>"$MY_LOG" 2>&1
    ) &
    local launcher=$! waited=0
    until my_ping_socket; do
        if [ "$waited" -ge "$WAIT_S" ]; then
            tail_log "$MY_LOG"
            die "MariaDB: did not answer within ${WAIT_S}s (see $MY_LOG)"
        fi
        if ! pid_alive "$launcher" && ! my_pid >/dev/null; then
            sleep 1
            if ! my_pid >/dev/null && ! my_ping_socket; then
                tail_log "$MY_LOG"
                die "MariaDB: server exited during startup (see $MY_LOG)"
            fi
        fi
        sleep 1
        waited=$((waited + 1))
    done
    my_provision
    my_answers || die "MariaDB: started but $DB_USER cannot log in on 127.0.0.1:$MY_PORT (see $MY_LOG)"
    log "MariaDB: ready (pid $(my_pid || echo '?'))"
}

my_stop() {
    local pid
    if ! pid="$(my_pid)"; then
        log "MariaDB: not running"
        rm -f "$MY_SOCK" "$MY_SOCK.lock"
        return 0
    fi
    log "MariaDB: stopping (pid $pid)"
    local admin
    if admin="$(find_cmd mariadb-admin mysqladmin)"; then
        timeout 30 "$admin" --no-defaults --protocol=socket --socket="$MY_SOCK" -u"$MY_ADMIN_USER" \
            --connect-timeout=5 shutdown >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
    else
        kill -TERM "$pid" 2>/dev/null || true
    fi
    wait_or_kill MariaDB "$pid" "$WAIT_S"
    rm -f "$MY_PID_FILE" "$MY_SOCK" "$MY_SOCK.lock"
}

# ---------------------------------------------------------------- commands

cmd_start() {
    pg_start
    my_start
}

cmd_stop() {
    local rc=0
    (pg_stop) || rc=1
    (my_stop) || rc=1
    [ "$rc" -eq 0 ] || die "stop: could not stop every server"
    log "stopped"
}

cmd_status() {
    local rc=0
    if pg_answers; then
        echo "postgresql: running, answers on 127.0.0.1:$PG_PORT (data $PG_DATA)"
    elif port_open "$PG_PORT"; then
        echo "postgresql: something listens on 127.0.0.1:$PG_PORT but $DB_USER cannot log in"
        rc=1
    else
        echo "postgresql: not running (127.0.0.1:$PG_PORT)"
        rc=1
    fi
    if my_answers; then
        echo "mariadb: running, answers on 127.0.0.1:$MY_PORT (data $MY_DATA)"
    elif port_open "$MY_PORT"; then
        echo "mariadb: something listens on 127.0.0.1:$MY_PORT but $DB_USER cannot log in"
        rc=1
    else
        echo "mariadb: not running (127.0.0.1:$MY_PORT)"
        rc=1
    fi
    return "$rc"
}

cmd_env() {
    printf 'export PAL_TEST_POSTGRES_URL=postgresql+psycopg://%s:%s@127.0.0.1:%s/%s\n' \
        "$DB_USER" "$DB_PASS" "$PG_PORT" "$DB_NAME"
    printf 'export PAL_TEST_MYSQL_URL=mysql+pymysql://%s:%s@127.0.0.1:%s/%s\n' \
        "$DB_USER" "$DB_PASS" "$MY_PORT" "$DB_NAME"
    # the servers' administrators over their unix sockets (no password: trust, unix_socket), for
    # the tests that create roles (tests/db/test_db_roles.py)
    printf "export PAL_TEST_POSTGRES_ADMIN_URL='postgresql+psycopg://postgres@/postgres?host=%s&port=%s'\n" \
        "$PG_SOCK_DIR" "$PG_PORT"
    printf "export PAL_TEST_MYSQL_ADMIN_URL='mysql+pymysql://%s@localhost/?unix_socket=%s'\n" \
        "$MY_ADMIN_USER" "$MY_SOCK"
}

usage() {
    echo "usage: $0 {install|start|stop|restart|status|env}" >&2
}

main() {
    if [ "$#" -ne 1 ]; then usage; exit 2; fi
    case "$1" in
        install) cmd_install ;;
        start) cmd_start ;;
        stop) cmd_stop ;;
        restart) cmd_stop; cmd_start ;;
        status) cmd_status ;;
        env) cmd_env ;;
        -h | --help | help) usage ;;
        *) usage; die "unknown command '$1'" ;;
    esac
}

main "$@"
