#!/usr/bin/env bash
# oar-local.sh - a throw-away local OAR 2.5.9 (Debian bookworm packages) with its own
# PostgreSQL, for coorm-bridge's integration tests. Runs as root, without systemd.
#
#   oar-local.sh install   apt-get the Debian packages (root; does nothing if all are installed)
#   oar-local.sh up        PostgreSQL on 127.0.0.1:$PGPORT (data under BASE), /etc/oar/oar.conf
#                          from its pristine copy + tests/oar/oar.conf.overrides.in, the OAR
#                          database, CLUSTERS x NODES x CORES resources, node emulation (OAR's
#                          sshd on 127.0.0.1:6667, node names -> 127.0.0.1 in ~oar/.ssh/config),
#                          Almighty, the REST API in a private Apache on 127.0.0.1:$OARAPI_PORT,
#                          the test users; waits until every resource is Alive; writes
#                          $BASE/env.sh
#   oar-local.sh down      stop what `up` started (PID files, see "Processes" below), restore
#                          /etc/oar/oar.conf, ~oar/.ssh/config, ~oar/.ssh/known_hosts and
#                          ~oar/unlimited_reservation.users from their pristine copies
#   oar-local.sh env       print the path of $BASE/env.sh (exit 1 if there is none)
#
# ONE instance per machine: OAR reads the machine-wide /etc/oar/oar.conf, its server listens on
# port 6666 and its node sshd on 6667, and its processes all run as the user oar. `up` takes
# the lock $LOCK while it works and records its BASE in $OWNER; it refuses (exit 5) while
# another instance is up, or while any process of the user oar runs.
#
# Parameters (environment):
#   BASE=${TMPDIR:-/tmp}/coorm-oar  database, configuration, logs, PID files, the users' work
#                        directories (job outputs). `up` wipes it, but only if it is empty or was
#                        made by `up` (marker file .coorm-oar-local).
#   PGPORT=15432         PostgreSQL (127.0.0.1 only)
#   OARAPI_PORT=16668    the REST API: http://127.0.0.1:$OARAPI_PORT/oarapi (loopback only)
#   CLUSTERS="alpha beta"  values of the resource property `cluster`
#   NODES=8              nodes per cluster, named <cluster>-1 .. <cluster>-NODES (property host)
#   CORES=2              cores (resources) per node (properties cpu = one per node, core)
#   OAR_TEST_USERS="coorm_alice coorm_bob"  created with useradd if missing; listed in
#                        ~oar/unlimited_reservation.users (admission rule 12 otherwise allows
#                        a user 2 waiting advance reservations). Letters, digits and '_' only:
#                        the REST API keeps only the first run of \w characters of the
#                        X-Remote-Ident login ("coorm-alice" becomes "coorm", and oardodo fails)
#   OAR_LIMITED_USERS="coorm_carol"  created too, NOT listed: admission rule 12 applies to them
#   KEEP_ON_FAIL=0|1     if `up` fails, 1 leaves the started daemons running (default: stopped)
#
# After `up`: . "$(oar-local.sh env)" sets COORM_OAR_* (see write_env): the API URL, the users,
# the clusters and their nodes, the PostgreSQL port, the log file.
# Exit codes: 0 ok, 1 failure, 2 usage, 3 a port is already in use, 4 BASE is busy or foreign,
#             5 another OAR instance is up on this machine (or `up`/`down` of one is running).
#
# Processes: `down` stops, in order, the Apache of the REST API (its PID file), Almighty and its
# descendants (the meta-scheduler, bipbip, sarko, finaud, ...), every remaining process of the
# user oar and their descendants, the node sshd (PID file) and its descendants, PostgreSQL. The
# daemons are recognised by PID file, command name and COORM_OAR_BASE=$BASE in their
# environment. The processes of the user oar are not started by this script but by OAR: the
# detached oarexec of each running job (DETACH_JOB_FROM_SERVER=1) and its ssh sessions, which
# own the jobs' processes (run as the test users). Stopping all of them is safe because `up`
# refuses to start while any process of the user oar runs, and nothing else starts OAR while
# this instance holds /etc/oar/oar.conf: every process of oar belongs to this instance. `down`
# with a BASE that does not hold the machine (see $OWNER) leaves them alone.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BASE=${BASE:-${TMPDIR:-/tmp}/coorm-oar}
PGPORT=${PGPORT:-15432}
OARAPI_PORT=${OARAPI_PORT:-16668}
CLUSTERS=${CLUSTERS:-alpha beta}
NODES=${NODES:-8}
CORES=${CORES:-2}
OAR_TEST_USERS=${OAR_TEST_USERS:-coorm_alice coorm_bob}
OAR_LIMITED_USERS=${OAR_LIMITED_USERS-coorm_carol}
KEEP_ON_FAIL=${KEEP_ON_FAIL:-0}
export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin
export LC_ALL=C.UTF-8
umask 022

MARKER=.coorm-oar-local
OAR_CONF=/etc/oar/oar.conf
PRISTINE=.coorm-pristine            # suffix of the saved package copies of the files we change
OWNER=/etc/oar/coorm-oar-local.base # BASE of the instance that holds /etc/oar/oar.conf
LOCK=/run/lock/coorm-oar-local.lock
SERVER_PORT=6666                    # Almighty's notification port (SERVER_PORT in oar.conf)
NODE_SSH_PORT=6667                  # OAR's sshd (/etc/oar/sshd_config; OPENSSH_CMD in oar.conf)
SETTINGS_TAG='coorm-bridge tests/oar/oar-local.sh'

log() { printf '[oar-local %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "FATAL: $1"; exit "${2:-1}"; }

oar_home() { getent passwd oar | cut -d: -f6; }

# ---------------------------------------------------------------- parameters
in_range() {  # value low high
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]
}

check_params() {
  local n seen=" " u
  [[ $BASE == /* ]] || BASE=$(pwd)/$BASE
  BASE=${BASE%/}
  [ "$BASE" != "" ] || die "BASE must not be /" 2
  # PostgreSQL's Unix socket path must fit in sun_path (108 bytes)
  [ "${#BASE}" -le 70 ] || die "BASE is too long (${#BASE} > 70 characters): $BASE" 2
  [[ $BASE =~ ^[A-Za-z0-9_./-]+$ ]] || die "BASE may hold only letters, digits and _./-: $BASE" 2
  for n in PGPORT OARAPI_PORT; do
    in_range "${!n}" 1024 65535 || die "$n must be a port number in 1024..65535" 2
  done
  [ "$PGPORT" != "$OARAPI_PORT" ] || die "PGPORT and OARAPI_PORT must differ" 2
  for n in "$PGPORT" "$OARAPI_PORT"; do
    case $n in "$SERVER_PORT"|"$NODE_SSH_PORT") die "ports $SERVER_PORT and $NODE_SSH_PORT are OAR's" 2 ;; esac
  done
  in_range "$NODES" 1 99 || die "NODES must be 1..99" 2
  in_range "$CORES" 1 64 || die "CORES must be 1..64" 2
  for n in $CLUSTERS; do
    [[ $n =~ ^[a-z][a-z0-9]{0,19}$ ]] || die "bad cluster name '$n': lowercase letters and digits, 20 at most" 2
    [[ $seen == *" $n "* ]] && die "CLUSTERS names '$n' twice" 2
    seen+="$n "
  done
  [ "$seen" != " " ] || die "CLUSTERS must name at least one cluster" 2
  [ -n "${OAR_TEST_USERS// /}" ] || die "OAR_TEST_USERS must name at least one user" 2
  seen=" "
  for u in $OAR_TEST_USERS $OAR_LIMITED_USERS; do
    # \w+ only: see OAR_TEST_USERS above
    [[ $u =~ ^[a-z_][a-z0-9_]{0,30}$ ]] || die "bad user name '$u': lowercase letters, digits and _" 2
    case $u in root|oar|postgres) die "test users must not be $u" 2 ;; esac
    [[ $seen == *" $u "* ]] && die "user '$u' named twice in OAR_TEST_USERS/OAR_LIMITED_USERS" 2
    seen+="$u "
  done
}

node_names() {  # cluster -> cluster-1 .. cluster-NODES
  local k; for ((k = 1; k <= NODES; k++)); do echo "$1-$k"; done
}

# ---------------------------------------------------------------- processes
listening_ports() {  # TCP ports in LISTEN state on this host (IPv4 and IPv6), decimal
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
    awk '$4 == "0A" { split($2, a, ":"); print a[2] }' | sort -u |
    while read -r hex; do echo $((16#$hex)); done
}
port_busy() {  # port (not `listening_ports | grep -q`: grep's early exit fails the pipe)
  local ports
  ports=$(listening_ports)
  grep -qx "$1" <<<"$ports"
}

environ_is_ours() {  # pid: started by `up` under this BASE
  local line
  while IFS= read -r -d '' line; do
    [ "$line" = "COORM_OAR_BASE=$BASE" ] && return 0
  done 2>/dev/null <"/proc/$1/environ"
  return 1
}
pid_is_ours() {  # pid expected-comm
  local pid=$1 comm
  [[ $pid =~ ^[0-9]+$ ]] && [ -d "/proc/$pid" ] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [ "$comm" = "$2" ] || return 1
  if [ "$comm" = sshd ]; then
    # sshd writes its process title over its environment; the title keeps its arguments
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "PidFile=$BASE/run/oar-sshd.pid"
  else
    environ_is_ours "$pid"
  fi
}
pidfile_pid() {  # pidfile expected-comm -> the PID if the process is ours and alive
  local pid
  [ -s "$1" ] || return 1
  pid=$(head -n 1 "$1" 2>/dev/null | tr -d ' ') || return 1
  pid_is_ours "$pid" "$2" && echo "$pid"
}

children_of() {  # pid... -> all their descendants (one line, space-separated)
  local -A kids=()
  local f stat pid ppid
  for f in /proc/[0-9]*/stat; do
    stat=$(cat "$f" 2>/dev/null) || continue
    pid=${stat%% *}; stat=${stat##*) }; ppid=$(echo "$stat" | cut -d' ' -f2)
    kids[$ppid]+="$pid "
  done
  local todo=("$@") out=()
  while [ "${#todo[@]}" -gt 0 ]; do
    pid=${todo[0]}; todo=("${todo[@]:1}")
    for f in ${kids[$pid]:-}; do out+=("$f"); todo+=("$f"); done
  done
  echo "${out[@]:-}"
}

proc_state() {  # pid -> its state letter (R, S, Z, ...); fails if there is no such process
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  echo "${stat%% *}"
}

alive() {  # pid... -> those still running (not zombies)
  local pid st
  for pid in "$@"; do
    st=$(proc_state "$pid") || continue
    [ "$st" = Z ] || echo "$pid"
  done
}

job_processes() {  # processes of this instance's jobs (their node file is under BASE/runtime)
  local d line
  for d in /proc/[0-9]*; do
    while IFS= read -r -d '' line; do
      if [[ $line == "OAR_FILE_NODES=$BASE/runtime/"* ]]; then alive "${d#/proc/}"; break; fi
    done 2>/dev/null <"$d/environ"
  done
}

oar_processes() {  # live processes whose real or effective user is oar
  local uid d pid real eff
  uid=$(id -u oar 2>/dev/null) || return 0
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    read -r _ real eff _ < <(grep '^Uid:' "$d/status" 2>/dev/null) || continue
    [ "$real" = "$uid" ] || [ "$eff" = "$uid" ] || continue
    alive "$pid"
  done
}

stop_pids() {  # name seconds pid... : TERM, wait, KILL what is left
  local name=$1 secs=$2 t left; shift 2
  [ "$#" -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null || true
  for ((t = secs * 10; t > 0; t--)); do
    left=$(alive "$@")
    [ -z "$left" ] && { log "down: stopped $name ($*)"; return 0; }
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -KILL $left 2>/dev/null || true
  log "down: killed $name ($left) after $secs s"
}

instance_alive() {  # BASE (default ours): some daemon of that instance runs
  local BASE=${1:-$BASE}
  pidfile_pid "$BASE/run/postgres.pid" postgres >/dev/null ||
    pidfile_pid "$BASE/run/almighty.pid" Almighty >/dev/null ||
    pidfile_pid "$BASE/run/oar-sshd.pid" sshd >/dev/null ||
    pidfile_pid "$BASE/run/apache.pid" apache2 >/dev/null
}

# The lock is on file descriptor 9, which the daemons must not inherit (they would hold the
# lock for as long as they run): every daemon is started with 9>&-.
take_lock() {  # seconds to wait (0: do not wait)
  exec 9>>"$LOCK"
  if [ "$1" = 0 ]; then
    flock -n 9 || die "another 'oar-local.sh up' or 'down' is running (lock $LOCK)" 5
  else
    flock -w "$1" 9 || die "another 'oar-local.sh up' or 'down' holds $LOCK for more than $1 s" 5
  fi
}

# ---------------------------------------------------------------- install
PACKAGES=(procps curl ca-certificates postgresql oar-server oar-server-pgsql oar-user
          oar-user-pgsql oar-node oar-restful-api libjson-perl apache2 openssh-server)
cmd_install() {
  local p missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ "${#missing[@]}" = 0 ]; then log "install: all packages already installed"; return; fi
  [ "$(id -u)" = 0 ] || die "install: must run as root (missing: ${missing[*]})"
  log "install: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # The packages must not start system services (PostgreSQL's main cluster on 5432, Apache on
  # 80, the OAR server and the OAR node sshd on /etc/oar): `up` starts what it needs itself.
  # A temporary policy-rc.d denies the starts (as in Docker images), unless the host already
  # has one, which is then left as it is.
  local policy=/usr/sbin/policy-rc.d added=0 rc=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# temporary, tests/oar/oar-local.sh install\nexit 101\n' >"$policy"
    chmod 0755 "$policy"; added=1
  fi
  apt-get -o DPkg::Lock::Timeout=600 update -q || rc=$?
  [ "$rc" != 0 ] ||
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${PACKAGES[@]}" || rc=$?
  [ "$added" = 0 ] || rm -f "$policy"
  [ "$rc" = 0 ] || die "install: apt-get failed (exit $rc)"
  # With systemd as PID 1 the packages may have started units that would hold OAR's ports and
  # /etc/oar; without systemd (containers, this project's CI) there is nothing to stop.
  if [ -d /run/systemd/system ]; then
    systemctl stop oar-server oar-node 2>/dev/null || true
  fi
  log "install: done"
}

# ---------------------------------------------------------------- machine-wide files
# Each file `up` changes outside BASE keeps one pristine copy beside it (<file>.coorm-pristine,
# made once from the package's file). `up` starts from that copy, `down` restores it.
save_pristine() {  # file
  local f=$1 p=$1$PRISTINE
  if [ -e "$p" ] || [ -e "$p.absent" ]; then return 0; fi
  if [ -e "$f" ] && grep -q "$SETTINGS_TAG" "$f"; then
    die "$f holds this script's settings but $p (its pristine copy) is missing: reinstall the package's file"
  fi
  if [ -e "$f" ]; then cp -a "$f" "$p"; else : >"$p.absent"; fi
}
restore_pristine() {  # file
  local f=$1 p=$1$PRISTINE
  if [ -e "$p" ]; then cp -a "$p" "$f"
  elif [ -e "$p.absent" ]; then rm -f "$f"
  fi
}

configure_oar() {
  local home patterns="" c line
  home=$(oar_home)
  save_pristine "$OAR_CONF"
  cp -a "$OAR_CONF$PRISTINE" "$OAR_CONF"
  # No cpuset/cgroup confinement on the emulated nodes (they all are this machine).
  sed -i -E 's/^(JOB_RESOURCE_MANAGER_PROPERTY_DB_FIELD=)/#\1/' "$OAR_CONF"
  sed -e "s|@PGPORT@|$PGPORT|g; s|@BASE@|$BASE|g" "$HERE/oar.conf.overrides.in" >>"$OAR_CONF"

  save_pristine "$home/.ssh/config"
  for c in $CLUSTERS; do patterns+=" $c-*"; done
  {
    sed "s|@NODE_PATTERNS@|${patterns# }|" "$HERE/oar-ssh-config.head.in"
    [ ! -e "$home/.ssh/config$PRISTINE" ] || cat "$home/.ssh/config$PRISTINE"
  } >"$home/.ssh/config"
  chown oar:oar "$home/.ssh/config"; chmod 0644 "$home/.ssh/config"

  # ssh to the nodes records OAR's host key there
  save_pristine "$home/.ssh/known_hosts"
  rm -f "$home/.ssh/known_hosts"
  [ ! -e "$home/.ssh/known_hosts$PRISTINE" ] || cp -a "$home/.ssh/known_hosts$PRISTINE" "$home/.ssh/known_hosts"

  name_nodes

  save_pristine "$home/unlimited_reservation.users"
  {
    [ ! -e "$home/unlimited_reservation.users$PRISTINE" ] || cat "$home/unlimited_reservation.users$PRISTINE"
    for line in $OAR_TEST_USERS; do echo "$line"; done
  } >"$home/unlimited_reservation.users"
  chown oar:oar "$home/unlimited_reservation.users"; chmod 0644 "$home/unlimited_reservation.users"
}

# The emulated nodes' names resolve to this machine, as a site's nodes resolve to theirs, so that
# what runs in a job can reach its peers by the node names OAR gives (MPI, rendezvous addresses).
# /etc/hosts is rewritten in place (it may be a bind mount): our one line, marked, added or taken.
HOSTS_FILE=/etc/hosts
HOSTS_TAG="# coorm-oar-local emulated nodes"
name_nodes() {
  local c names=()
  for c in $CLUSTERS; do mapfile -t -O "${#names[@]}" names < <(node_names "$c"); done
  unname_nodes
  echo "127.0.0.1 ${names[*]} $HOSTS_TAG" >>"$HOSTS_FILE"
}
unname_nodes() {
  local kept
  kept=$(grep -vF "$HOSTS_TAG" "$HOSTS_FILE" || true)
  printf '%s\n' "$kept" >"$HOSTS_FILE"
}

restore_oar() {
  local home
  home=$(oar_home)
  unname_nodes
  restore_pristine "$OAR_CONF"
  restore_pristine "$home/.ssh/config"
  restore_pristine "$home/.ssh/known_hosts"
  restore_pristine "$home/unlimited_reservation.users"
}

# ---------------------------------------------------------------- up
start_postgres() {
  local pgbin
  pgbin=$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d | sort -V | tail -n 1)
  [ -x "$pgbin/initdb" ] || die "PostgreSQL is not installed: run '$0 install'"
  install -d -o postgres -g postgres -m 0700 "$BASE/pg/data"
  install -d -o postgres -g postgres -m 0755 "$BASE/pg/sock"
  runuser -u postgres -- "$pgbin/initdb" -D "$BASE/pg/data" -U postgres --auth=trust -E UTF8 \
    >"$BASE/log/initdb.log" 2>&1 || die "initdb failed: $(tail -n 20 "$BASE/log/initdb.log")"
  install -o postgres -g postgres -m 0644 /dev/null "$BASE/log/postgres.log"
  COORM_OAR_BASE=$BASE runuser -u postgres -- "$pgbin/pg_ctl" -D "$BASE/pg/data" \
    -l "$BASE/log/postgres.log" -w -t 60 \
    -o "-h 127.0.0.1 -p $PGPORT -k $BASE/pg/sock -c fsync=off -c full_page_writes=off" \
    start >/dev/null 9>&- || die "PostgreSQL did not start: $(tail -n 20 "$BASE/log/postgres.log")"
  head -n 1 "$BASE/pg/data/postmaster.pid" >"$BASE/run/postgres.pid"
  log "PostgreSQL $("$pgbin/postgres" -V | awk '{print $3}') on 127.0.0.1:$PGPORT (pid $(cat "$BASE/run/postgres.pid"))"
}

create_database() {
  oar-database --create --db-admin-user postgres --db-admin-pass unused \
    >"$BASE/log/oar-database.log" 2>&1 ||
    die "oar-database --create failed: $(tail -n 20 "$BASE/log/oar-database.log")"
  oar-database --check >>"$BASE/log/oar-database.log" 2>&1 || die "oar-database --check failed"
}

add_resources() {
  local c n k cpu=0 core=0
  oarproperty -a cluster -c >/dev/null
  oarproperty -a host -c >/dev/null
  oarproperty -a cpu >/dev/null
  oarproperty -a core >/dev/null
  for c in $CLUSTERS; do
    for n in $(node_names "$c"); do
      cpu=$((cpu + 1))
      for ((k = 0; k < CORES; k++)); do
        core=$((core + 1))
        oarnodesetting -a -h "$n" -p cluster="$c" -p host="$n" -p cpu="$cpu" -p core="$core" \
          -p cpuset="$k" >/dev/null
      done
    done
  done
  log "resources: $core ($(echo "$CLUSTERS" | wc -w) clusters x $NODES nodes x $CORES cores)"
}

start_node_sshd() {
  local home first _
  home=$(oar_home)
  mkdir -p /run/sshd   # privilege separation directory (systemd's tmpfiles make it otherwise)
  COORM_OAR_BASE=$BASE /usr/sbin/sshd -f /etc/oar/sshd_config -o ListenAddress=127.0.0.1 \
    -o PidFile="$BASE/run/oar-sshd.pid" -E "$BASE/log/oar-sshd.log" 9>&-
  for _ in $(seq 50); do [ -s "$BASE/run/oar-sshd.pid" ] && break; sleep 0.1; done
  [ -s "$BASE/run/oar-sshd.pid" ] || die "OAR's sshd did not start: $(tail -n 5 "$BASE/log/oar-sshd.log")"
  first="${CLUSTERS%% *}-1"
  runuser -u oar -- env HOME="$home" ssh -p "$NODE_SSH_PORT" -e none -o BatchMode=yes "$first" true \
    >"$BASE/log/ssh-check.log" 2>&1 ||
    die "ssh oar@$first:$NODE_SSH_PORT failed: $(cat "$BASE/log/ssh-check.log")"
  log "node sshd on 127.0.0.1:$NODE_SSH_PORT (pid $(cat "$BASE/run/oar-sshd.pid")): ssh oar@$first works"
}

start_almighty() {
  local _
  install -o oar -g oar -m 0644 /dev/null "$BASE/log/oar.log"
  # setsid: its own session, away from the caller's terminal and process group.
  COORM_OAR_BASE=$BASE setsid /usr/sbin/Almighty >"$BASE/log/almighty.out" 2>&1 </dev/null 9>&- &
  echo $! >"$BASE/run/almighty.pid"
  for _ in $(seq 300); do
    grep -q 'Start bipbip handler' "$BASE/log/oar.log" 2>/dev/null && port_busy "$SERVER_PORT" && break
    sleep 0.1
  done
  grep -q 'Start bipbip handler' "$BASE/log/oar.log" ||
    die "Almighty did not start: $(tail -n 20 "$BASE/log/oar.log" "$BASE/log/almighty.out")"
  port_busy "$SERVER_PORT" || die "Almighty does not listen on $SERVER_PORT"
  log "Almighty (pid $(cat "$BASE/run/almighty.pid")) listens on $SERVER_PORT"
}

start_api() {
  local _
  mkdir -p "$BASE/run/apache"
  sed -e "s|@BASE@|$BASE|g; s|@OARAPI_PORT@|$OARAPI_PORT|g" "$HERE/oarapi-httpd.conf.in" \
    >"$BASE/etc/oarapi-httpd.conf"
  COORM_OAR_BASE=$BASE /usr/sbin/apache2 -f "$BASE/etc/oarapi-httpd.conf" -k start 9>&- ||
    die "Apache did not start: $(tail -n 20 "$BASE/log/apache-error.log" 2>/dev/null)"
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$OARAPI_PORT/oarapi/version.json" >"$BASE/log/api-version.json" 2>/dev/null && break
    sleep 0.1
  done
  grep -q oar_version "$BASE/log/api-version.json" ||
    die "the REST API does not answer: $(tail -n 20 "$BASE/log/apache-error.log" 2>/dev/null)"
  log "REST API on http://127.0.0.1:$OARAPI_PORT/oarapi (Apache pid $(cat "$BASE/run/apache.pid"))"
}

add_users() {
  local u
  for u in $OAR_TEST_USERS $OAR_LIMITED_USERS; do
    if ! id "$u" >/dev/null 2>&1; then
      useradd -m -s /bin/bash "$u"
      log "user $u created"
    fi
    # the users' working directories: oarsub runs there, job outputs land there
    install -d -o "$u" -g "$(id -gn "$u")" -m 0755 "$BASE/work/$u"
  done
}

wait_alive() {
  local want got=0 _
  want=$(( $(echo "$CLUSTERS" | wc -w) * NODES * CORES ))
  for _ in $(seq 300); do
    got=$(oarnodes -s 2>/dev/null | grep -c ' : Alive$' || true)
    [ "$got" -ge "$want" ] && { log "$got/$want resources Alive"; return; }
    sleep 0.1
  done
  oarnodes -s >&2 || true
  die "only $got/$want resources Alive after 30 s"
}

write_env() {
  local c u first
  first=${OAR_TEST_USERS%% *}
  {
    echo "# written by tests/oar/oar-local.sh up; source it"
    echo "export COORM_OAR_BASE=$BASE"
    echo "export COORM_OAR_VERSION=$(dpkg-query -W -f='${Version}' oar-server)"
    echo "export COORM_OAR_API_URL=http://127.0.0.1:$OARAPI_PORT/oarapi"
    echo "export COORM_OAR_API_PORT=$OARAPI_PORT"
    echo "export COORM_OAR_USERS=\"$OAR_TEST_USERS\""
    echo "export COORM_OAR_USER=$first"
    echo "export COORM_OAR_LIMITED_USERS=\"$OAR_LIMITED_USERS\""
    echo "export COORM_OAR_WORK=$BASE/work"
    echo "export COORM_OAR_CLUSTERS=\"$CLUSTERS\""
    echo "export COORM_OAR_NODES=$NODES"
    echo "export COORM_OAR_CORES=$CORES"
    for c in $CLUSTERS; do
      echo "export COORM_OAR_NODES_$c=\"$(node_names "$c" | paste -sd' ')\""
    done
    echo "export COORM_OAR_PGPORT=$PGPORT"
    echo "export COORM_OAR_DB_URL=postgresql://oar:oar@127.0.0.1:$PGPORT/oar"
    echo "export COORM_OAR_DB_RO_URL=postgresql://oar_ro:oar_ro@127.0.0.1:$PGPORT/oar"
    echo "export COORM_OAR_LOG=$BASE/log/oar.log"
    echo "export COORM_OAR_CONF=$OAR_CONF"
    echo "export COORM_OAR_SERVER_PORT=$SERVER_PORT"
    echo "export COORM_OAR_NODE_SSH_PORT=$NODE_SSH_PORT"
  } >"$BASE/env.sh.tmp"
  mv "$BASE/env.sh.tmp" "$BASE/env.sh"
  chmod 0644 "$BASE/env.sh"
}

show_logs() {
  local f
  for f in "$BASE"/log/oar.log "$BASE"/log/almighty.out "$BASE"/log/postgres.log \
           "$BASE"/log/apache-error.log "$BASE"/log/oar-sshd.log; do
    [ -s "$f" ] || continue
    echo "----- tail of $f" >&2; tail -n 25 "$f" >&2
  done
  return 0
}

IN_UP=0
on_exit() {
  local rc=$?
  set +e
  trap - ERR
  if [ "$IN_UP" = 1 ] && [ "$rc" != 0 ]; then
    show_logs
    if [ "$KEEP_ON_FAIL" = 1 ]; then log "up failed: daemons left running (KEEP_ON_FAIL=1)"
    else log "up failed: stopping what was started"; IN_UP=0; stop_all; fi
  fi
  exit "$rc"
}

cmd_up() {
  local t0 owner busy p
  t0=$(date +%s%N)
  [ "$(id -u)" = 0 ] || die "up: must run as root"
  local b
  for b in Almighty oarsub oarnodesetting oar-database sshd apache2 curl; do
    command -v "$b" >/dev/null || die "$b is missing: run '$0 install'"
  done
  take_lock 0
  if [ -s "$OWNER" ]; then
    owner=$(cat "$OWNER")
    if instance_alive "$owner"; then
      die "an OAR instance is up under BASE=$owner: run 'BASE=$owner $0 down' first" 5
    fi
    log "up: the instance recorded in $OWNER ($owner) is not running any more: taking over"
  fi
  if [ -n "$(oar_processes)" ]; then
    die "processes of the user oar are running (another OAR on this machine?): $(oar_processes | paste -sd' ')" 5
  fi
  for p in "$SERVER_PORT" "$NODE_SSH_PORT"; do
    port_busy "$p" && die "port $p (OAR's) is in use: another OAR server or node on this machine?" 5
  done
  busy=""
  for p in "$PGPORT" "$OARAPI_PORT"; do port_busy "$p" && busy+=" $p"; done
  [ -z "$busy" ] || die "TCP port(s) already in use:$busy (choose another PGPORT/OARAPI_PORT)" 3
  if [ -e "$BASE" ] && [ ! -e "$BASE/$MARKER" ] && [ -n "$(ls -A "$BASE" 2>/dev/null)" ]; then
    die "BASE=$BASE exists, is not empty and was not made by this script: not wiping it" 4
  fi
  rm -rf "$BASE"
  mkdir -p "$BASE"/{etc,run,log,work}
  touch "$BASE/$MARKER"
  # PostgreSQL, Apache (as oar) and the jobs (as the test users) read or write under BASE
  chmod 0755 "$BASE" "$BASE/etc" "$BASE/run" "$BASE/log" "$BASE/work"
  install -d -o oar -g oar -m 0755 "$BASE/runtime"   # OAR_RUNTIME_DIRECTORY
  IN_UP=1
  echo "$BASE" >"$OWNER"
  configure_oar
  add_users
  start_postgres
  create_database
  add_resources
  start_node_sshd
  start_almighty
  start_api
  wait_alive
  write_env
  IN_UP=0
  log "up in $(( ($(date +%s%N) - t0) / 1000000 )) ms: CLUSTERS='$CLUSTERS' NODES=$NODES CORES=$CORES users '$OAR_TEST_USERS'"
  log "source $BASE/env.sh"
}

# ---------------------------------------------------------------- down
stop_all() {
  local pid pids=() kids
  # The REST API: Apache's parent stops its workers on TERM.
  if pid=$(pidfile_pid "$BASE/run/apache.pid" apache2); then
    # shellcheck disable=SC2046
    stop_pids "Apache" 10 "$pid" $(children_of "$pid")
  fi
  # The OAR server: Almighty and its descendants (collected first: they outlive it otherwise).
  if pid=$(pidfile_pid "$BASE/run/almighty.pid" Almighty); then
    kids=$(children_of "$pid")
    # shellcheck disable=SC2086
    stop_pids "Almighty and its children" 10 "$pid" $kids
  fi
  # The jobs: detached oarexec (user oar) and what runs under them (the test users' processes,
  # also found by their node file if they left that tree). Only this instance's: see
  # "Processes" at the head of this file. oarexec ignores TERM while it waits for its job.
  # (the processes of the user oar only if this BASE holds the machine: another BASE's `down`
  # must not touch the running instance)
  if [ -s "$OWNER" ] && [ "$(cat "$OWNER")" = "$BASE" ]; then
    mapfile -t pids < <(oar_processes; job_processes)
  else
    mapfile -t pids < <(job_processes)
  fi
  if [ "${#pids[@]}" -gt 0 ]; then
    kids=$(children_of "${pids[@]}")
    # shellcheck disable=SC2086
    stop_pids "the jobs: processes of the user oar and their children" 2 "${pids[@]}" $kids
  fi
  if pid=$(pidfile_pid "$BASE/run/oar-sshd.pid" sshd); then
    # shellcheck disable=SC2046
    stop_pids "the node sshd" 10 "$pid" $(children_of "$pid")
  fi
  if pid=$(pidfile_pid "$BASE/run/postgres.pid" postgres); then
    local pgbin
    pgbin=$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d | sort -V | tail -n 1)
    runuser -u postgres -- "$pgbin/pg_ctl" -D "$BASE/pg/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
      stop_pids PostgreSQL 10 "$pid"
    [ -z "$(alive "$pid")" ] && log "down: stopped PostgreSQL ($pid)"
  fi
  if [ -s "$OWNER" ] && [ "$(cat "$OWNER")" = "$BASE" ]; then
    restore_oar
    rm -f "$OWNER"
    log "down: restored $OAR_CONF, ~oar/.ssh/config, known_hosts, unlimited_reservation.users"
  fi
  rm -f "$BASE"/run/*.pid "$BASE/env.sh"
}

cmd_down() {
  if [ ! -e "$BASE/$MARKER" ]; then log "down: nothing started under $BASE"; return 0; fi
  [ "$(id -u)" = 0 ] || die "down: must run as root"
  take_lock 300
  stop_all
  log "down: done ($BASE)"
}

cmd_env() {
  [ -s "$BASE/env.sh" ] || { log "no $BASE/env.sh: run '$0 up' first"; echo "$BASE/env.sh"; exit 1; }
  echo "$BASE/env.sh"
}

set -E
on_err() {  # line command (not from subshells: a process that ends while /proc is read is fine)
  local rc=$?
  [ "$BASH_SUBSHELL" != 0 ] || log "command failed (exit $rc) at line $1: $2"
}
trap 'on_err "$LINENO" "$BASH_COMMAND"' ERR
trap on_exit EXIT
case "${1:-}" in
  install) cmd_install ;;
  up) check_params; cmd_up ;;
  down) check_params; cmd_down ;;   # needs only BASE
  env) check_params; cmd_env ;;
  *) echo "usage: $0 install|up|down|env   (parameters: see the head of this file)" >&2
     exit 2 ;;
esac
