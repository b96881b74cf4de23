#!/usr/bin/env bash
# slurm-local.sh - a throw-away local Slurm 22.05 (Debian bookworm) for coorm-bridge's tests.
# Runs as root, without systemd, on one host; several instances can run side by side as long as
# their BASE and PORT_BASE differ.
#
#   slurm-local.sh install   apt-get the Debian packages (root; does nothing if all are installed)
#   slurm-local.sh munge     start munged alone under BASE (if none answers); `down` stops it
#   slurm-local.sh up        start munged (reused if one answers), [mariadb + slurmdbd], one
#                            slurmctld per Slurm cluster, one slurmd per node, [slurmrestd];
#                            wait until every node is idle; write $BASE/env.sh
#   slurm-local.sh down      stop what `up` started under this BASE (by PID file only)
#   slurm-local.sh env       print the path of $BASE/env.sh (exit 1 if there is none)
#
# Parameters (environment):
#   BASE=${TMPDIR:-/tmp}/coorm-slurm  everything goes there (configs, state, logs, PID files).
#                                     `up` wipes it, but only if it is empty or was made by `up`.
#   PORT_BASE=7800   ports used: PORT_BASE+0 slurmdbd, +1 own mariadb, +2 SlurmdPort (unused),
#                    +10+i slurmctld of Slurm cluster i, +20+i its slurmrestd (JWT, TCP),
#                    +100*(j+1)+n slurmd of node n of cluster/partition j. An instance uses
#                    [PORT_BASE, PORT_BASE+100*(number of CLUSTERS+1)): space instances by that
#                    much (tests/slurm/conftest.py uses blocks of 1000 from 7800).
#   MODE=partitions  one slurmctld ($CONTROLLER), one partition per name in CLUSTERS
#   MODE=clusters    one slurmctld per name in CLUSTERS (each with one partition of that name)
#   CLUSTERS="alpha beta"  lowercase names; the first is the default (partition or cluster)
#   CONTROLLER=coorm       Slurm cluster name in MODE=partitions
#   NODES=8          nodes per cluster/partition, named <name>01..<name>NN (NN <= 99)
#   DBD=0|1          mariadb + slurmdbd (accounting; `-M <cluster>` needs it in MODE=clusters)
#   ENFORCE=         DBD=1: AccountingStorageEnforce (e.g. associations,limits,qos); and
#                    EnforcePartLimits=ALL with it (jobs past a partition's limits refused)
#   REST=0|1         slurmrestd per Slurm cluster: Unix socket (rest_auth/local, as root) and
#                    127.0.0.1:PORT (rest_auth/jwt, as nobody; use `scontrol token`)
#   MARIADB=auto|own auto: reuse a mariadb that answers `mariadb -e 'select 1'` (own database
#                    named after PORT_BASE), else start one under BASE; own: always start one
#   KEEP_ON_FAIL=0|1 if `up` fails, 1 leaves the started daemons running (default: stopped)
#   MUNGE_STOP=auto|always  down: always stops a munged this BASE started (default: not while
#                    another Slurm daemon runs on the host)
#
# After `up`: . "$(slurm-local.sh env)" sets SLURM_CONF (default cluster), SLURM_CONF_<cluster>,
# SLURMRESTD_SOCK_<cluster> and SLURMRESTD_URL_<cluster> (REST=1), COORM_SLURM_* (see write_env).
# Exit codes: 0 ok, 1 failure, 2 usage, 3 a port is already in use, 4 BASE is busy or foreign.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BASE=${BASE:-${TMPDIR:-/tmp}/coorm-slurm}
PORT_BASE=${PORT_BASE:-7800}
MODE=${MODE:-partitions}
CLUSTERS=${CLUSTERS:-alpha beta}
CONTROLLER=${CONTROLLER:-coorm}
NODES=${NODES:-8}
DBD=${DBD:-0}
ENFORCE=${ENFORCE:-}
REST=${REST:-0}
MARIADB=${MARIADB:-auto}
KEEP_ON_FAIL=${KEEP_ON_FAIL:-0}
# down: stop a munged this BASE started even if other Slurm daemons still run (the caller knows
# they are its own, on their way out: the test session's munge fixture)
MUNGE_STOP=${MUNGE_STOP:-auto}
export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin
umask 022
MARKER=.coorm-slurm-local
DAEMONS='slurmctld slurmscriptd slurmd slurmstepd slurmdbd slurmrestd mariadbd'

log() { printf '[slurm-local %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "FATAL: $*"; exit "${2:-1}"; }

# ---------------------------------------------------------------- parameters and layout
check_params() {
  case $MODE in partitions|clusters) ;; *) die "MODE must be partitions or clusters, not '$MODE'" 2 ;; esac
  case $DBD in 0|1) ;; *) die "DBD must be 0 or 1" 2 ;; esac
  case $REST in 0|1) ;; *) die "REST must be 0 or 1" 2 ;; esac
  [[ $ENFORCE =~ ^[a-z,]*$ ]] || die "ENFORCE must be a list of AccountingStorageEnforce words" 2
  case $MARIADB in auto|own) ;; *) die "MARIADB must be auto or own" 2 ;; esac
  [[ $PORT_BASE =~ ^[0-9]+$ ]] && [ "$PORT_BASE" -ge 1024 ] && [ "$PORT_BASE" -le 64000 ] ||
    die "PORT_BASE must be a number in 1024..64000" 2
  [[ $NODES =~ ^[0-9]+$ ]] && [ "$NODES" -ge 1 ] && [ "$NODES" -le 99 ] || die "NODES must be 1..99" 2
  local n names=() seen=" "
  for n in $CLUSTERS $CONTROLLER; do
    [[ $n =~ ^[a-z][a-z0-9]{0,19}$ ]] || die "bad name '$n': lowercase letters and digits, 20 at most" 2
  done
  for n in $CLUSTERS; do
    [[ $seen == *" $n "* ]] && die "CLUSTERS names '$n' twice" 2
    seen+="$n "; names+=("$n")
  done
  [ "${#names[@]}" -ge 1 ] && [ "${#names[@]}" -le 9 ] || die "CLUSTERS must name 1..9 clusters" 2
  [[ $BASE == /* ]] || BASE=$(pwd)/$BASE
  BASE=${BASE%/}
  [ -n "$BASE" ] && [ "$BASE" != / ] || die "BASE must not be /" 2
  # the longest Unix socket path must fit in sun_path (108 bytes)
  [ "${#BASE}" -le 70 ] || die "BASE is too long for Unix sockets (${#BASE} > 70 characters): $BASE" 2
}

# The Slurm clusters (slurmctld instances), one per line: name index
controllers() {
  if [ "$MODE" = clusters ]; then
    local i=0 n; for n in $CLUSTERS; do echo "$n $i"; i=$((i + 1)); done
  else
    echo "$CONTROLLER 0"
  fi
}
# The groups of nodes, one per line: name index controller (a partition named after each)
groups_() {
  local i=0 n
  for n in $CLUSTERS; do
    if [ "$MODE" = clusters ]; then echo "$n $i $n"; else echo "$n $i $CONTROLLER"; fi
    i=$((i + 1))
  done
}
ctld_port() { echo $((PORT_BASE + 10 + $1)); }
rest_port() { echo $((PORT_BASE + 20 + $1)); }
dbd_port() { echo "$PORT_BASE"; }
mysql_port() { echo $((PORT_BASE + 1)); }
node_port() { echo $((PORT_BASE + 100 * ($1 + 1) + $2)); }   # group_index node_number
hostlist() {  # name -> name[01-NN]
  if [ "$NODES" = 1 ]; then echo "${1}01"; else printf '%s[01-%02d]\n' "$1" "$NODES"; fi
}
node_names() {  # name -> name01 .. nameNN, one per line
  local k; for ((k = 1; k <= NODES; k++)); do printf '%s%02d\n' "$1" "$k"; done
}
conf_of() { echo "$BASE/etc/$1.conf"; }
first_controller() { controllers | head -1 | cut -d' ' -f1; }

all_ports() {  # every TCP port this instance will listen on
  local name i
  while read -r name i; do
    ctld_port "$i"
    [ "$REST" = 1 ] && rest_port "$i"
  done < <(controllers)
  if [ "$DBD" = 1 ]; then dbd_port; mysql_port; fi
  while read -r name i _; do
    for ((k = 1; k <= NODES; k++)); do node_port "$i" "$k"; done
  done < <(groups_)
}

listening_ports() {  # TCP ports in LISTEN state on this host (IPv4 and IPv6), decimal
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
    awk '$4 == "0A" { split($2, a, ":"); print a[2] }' | sort -u |
    while read -r hex; do echo $((16#$hex)); done
}

check_ports() {
  local busy
  busy=$(comm -12 <(listening_ports | sort) <(all_ports | sort -u | sort) | sort -n | paste -sd' ')
  [ -z "$busy" ] || die "TCP port(s) already in use: $busy (choose another PORT_BASE)" 3
}

# ---------------------------------------------------------------- processes (ours only)
# A process is ours if its environment holds COORM_SLURM_BASE=$BASE (set on every daemon that
# `up` starts) or SLURM_CONF under $BASE (slurmstepd and the jobs' processes).
environ_is_ours() {  # pid
  local line
  while IFS= read -r -d '' line; do
    [ "$line" = "COORM_SLURM_BASE=$BASE" ] && return 0
    [[ $line == "SLURM_CONF=$BASE/"* ]] && return 0
  done 2>/dev/null <"/proc/$1/environ"
  return 1
}
pid_is_ours() {  # pid [expected comm]
  local pid=$1 comm
  [[ $pid =~ ^[0-9]+$ ]] && [ -d "/proc/$pid" ] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [ -z "${2:-}" ] || [ "$comm" = "$2" ] || return 1
  # munged runs as user munge (started through runuser): its PID file under BASE is enough
  [ "$comm" = munged ] || environ_is_ours "$pid"
}

children_of() {  # pid... -> all descendants
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

stray_daemons() {  # our Slurm/mariadb processes not (or no longer) covered by a PID file
  local d pid comm
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" = $$ ] && continue
    comm=$(cat "$d/comm" 2>/dev/null) || continue
    [[ " $DAEMONS " == *" $comm "* ]] || continue
    environ_is_ours "$pid" && echo "$pid"
  done
}

wait_gone() {  # seconds pid...
  local t=$(($1 * 10)) pid alive; shift
  while [ "$t" -gt 0 ]; do
    alive=0
    for pid in "$@"; do [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.1; t=$((t - 1))
  done
  return 1
}

# ---------------------------------------------------------------- install
PACKAGES=(slurm-wlm slurmctld slurmd slurm-client slurmrestd slurm-wlm-jwt-plugin munge
          mariadb-server slurmdbd curl openssh-server)
cmd_install() {
  local p missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ "${#missing[@]}" = 0 ]; then log "install: all packages already installed"; return; fi
  [ "$(id -u)" = 0 ] || die "install: must run as root (missing: ${missing[*]})"
  log "install: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # The packages must not start system services (slurmctld on /etc/slurm, mariadb, munged):
  # `up` starts what it needs itself. A temporary policy-rc.d denies the starts (as in Docker
  # images), unless the host already has one.
  local policy=/usr/sbin/policy-rc.d added=0 rc=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# temporary, tests/slurm/slurm-local.sh install\nexit 101\n' >"$policy"
    chmod 0755 "$policy"; added=1
  fi
  apt-get -o DPkg::Lock::Timeout=600 update -q || rc=$?
  [ "$rc" != 0 ] ||
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${PACKAGES[@]}" || rc=$?
  [ "$added" = 0 ] || rm -f "$policy"
  [ "$rc" = 0 ] || die "install: apt-get failed (exit $rc)"
  # With systemd as PID 1 the packages may have started units that would use /etc/slurm.
  if [ -d /run/systemd/system ]; then
    systemctl stop slurmctld slurmd slurmdbd slurmrestd 2>/dev/null || true
  fi
  log "install: done"
}

# ---------------------------------------------------------------- up
start_munge() {  # two runs at once (test workers): one starts munged, the other then reuses it
  local rc=0
  exec 8>>/tmp/coorm-munge-start.lock
  flock 8
  start_munge_unlocked || rc=$?
  flock -u 8
  exec 8>&-
  return "$rc"
}

start_munge_unlocked() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "munged answers: reusing it"; return
  fi
  install -d -o munge -g munge -m 0755 /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1k count=1 2>/dev/null
    chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  fi
  rm -f /run/munge/munged.pid
  COORM_SLURM_BASE=$BASE runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
  local _
  for _ in $(seq 50); do
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
      cp /run/munge/munged.pid "$BASE/run/munged.pid"   # ours: `down` may stop it
      log "munged started (pid $(cat /run/munge/munged.pid))"; return
    fi
    sleep 0.1
  done
  die "munged did not come up"
}

MYSQL=(mariadb)
STORAGE_HOST=localhost STORAGE_PORT=3306 STORAGE_USER=coorm_slurm STORAGE_PASS=coorm_slurm
start_mariadb() {
  if [ "$MARIADB" = auto ] && mariadb -e 'select 1' >/dev/null 2>&1; then
    log "mariadb answers: reusing it (database $STORAGE_LOC)"
    echo "reused $STORAGE_LOC" >"$BASE/run/mariadb.mode"
    STORAGE_HOST=localhost STORAGE_PORT=3306
  else
    local data=$BASE/mysql sock=$BASE/run/mysqld.sock
    mkdir -p "$data"
    log "mariadb: initialising $data"
    mariadb-install-db --no-defaults --datadir="$data" --user=root --skip-test-db \
      --auth-root-authentication-method=socket >"$BASE/log/mariadb-install.log" 2>&1 ||
      die "mariadb-install-db failed: $(tail -n 20 "$BASE/log/mariadb-install.log")"
    COORM_SLURM_BASE=$BASE nohup mariadbd --no-defaults --datadir="$data" --user=root \
      --socket="$sock" --port="$(mysql_port)" --bind-address=127.0.0.1 --skip-name-resolve \
      --pid-file="$BASE/run/mariadbd.internal.pid" --log-error="$BASE/log/mariadb.log" \
      --innodb-buffer-pool-size=32M --innodb-log-file-size=16M --skip-log-bin \
      </dev/null >>"$BASE/log/mariadb.log" 2>&1 &
    echo $! >"$BASE/run/mariadbd.pid"
    echo own >"$BASE/run/mariadb.mode"
    MYSQL=(mariadb --no-defaults --socket="$sock" --user=root)
    local _
    for _ in $(seq 150); do "${MYSQL[@]}" -e 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
    "${MYSQL[@]}" -e 'select 1' >/dev/null 2>&1 || die "mariadb did not come up"
    STORAGE_HOST=127.0.0.1 STORAGE_PORT=$(mysql_port)
    log "mariadb started on 127.0.0.1:$STORAGE_PORT"
  fi
  local host; [ "$STORAGE_HOST" = localhost ] && host=localhost || host=127.0.0.1
  "${MYSQL[@]}" -e "DROP DATABASE IF EXISTS $STORAGE_LOC; CREATE DATABASE $STORAGE_LOC;
      CREATE USER IF NOT EXISTS '$STORAGE_USER'@'$host' IDENTIFIED BY '$STORAGE_PASS';
      GRANT ALL ON $STORAGE_LOC.* TO '$STORAGE_USER'@'$host'; FLUSH PRIVILEGES;"
}

start_slurmdbd() {
  local conf; conf=$(conf_of "$(first_controller)")
  sed -e "s|@BASE@|$BASE|g; s|@DBD_PORT@|$(dbd_port)|g; s|@STORAGE_HOST@|$STORAGE_HOST|g;
          s|@STORAGE_PORT@|$STORAGE_PORT|g; s|@STORAGE_USER@|$STORAGE_USER|g;
          s|@STORAGE_PASS@|$STORAGE_PASS|g; s|@STORAGE_LOC@|$STORAGE_LOC|g" \
    "$HERE/slurmdbd.conf.in" >"$BASE/etc/slurmdbd.conf"
  chmod 0600 "$BASE/etc/slurmdbd.conf"
  # slurmdbd reads slurmdbd.conf next to $SLURM_CONF
  COORM_SLURM_BASE=$BASE SLURM_CONF=$conf slurmdbd
  local _ names
  for _ in $(seq 300); do
    SLURM_CONF=$conf sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2
  done
  SLURM_CONF=$conf sacctmgr -n list cluster >/dev/null 2>&1 || die "slurmdbd did not answer"
  names=$(controllers | cut -d' ' -f1 | paste -sd' ')
  # shellcheck disable=SC2086
  SLURM_CONF=$conf sacctmgr -i add cluster $names >/dev/null
  log "slurmdbd up on port $(dbd_port), clusters: $names"
}

write_conf() {  # controller index
  local name=$1 i=$2 dir=$BASE/$1 conf first g gi gc
  conf=$(conf_of "$name")
  mkdir -p "$dir"/{state/ctld,state/d,run,log}
  if [ "$MODE" = clusters ]; then first=$(((i + 1) * 1000000)); else first=1; fi
  sed -e "s|@CLUSTER@|$name|g; s|@DIR@|$dir|g; s|@BASE@|$BASE|g; s|@CTLD_PORT@|$(ctld_port "$i")|g;
          s|@SLURMD_PORT@|$((PORT_BASE + 2))|g; s|@FIRST_JOB_ID@|$first|g" \
    "$HERE/slurm.conf.in" >"$conf"
  if [ "$DBD" = 1 ]; then
    printf 'AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\nAccountingStoragePort=%s\n' \
      "$(dbd_port)" >>"$conf"
    if [ -n "$ENFORCE" ]; then
      printf 'AccountingStorageEnforce=%s\nEnforcePartLimits=ALL\n' "$ENFORCE" >>"$conf"
    fi
  else
    printf 'AccountingStorageType=accounting_storage/none\n' >>"$conf"
  fi
  local default=YES ports
  while read -r g gi gc; do
    [ "$gc" = "$name" ] || continue
    if [ "$NODES" = 1 ]; then ports=$(node_port "$gi" 1); else
      ports="[$(node_port "$gi" 1)-$(node_port "$gi" "$NODES")]"; fi
    echo "NodeName=$(hostlist "$g") NodeHostname=localhost Port=$ports CPUs=2 RealMemory=1000 State=UNKNOWN" >>"$conf"
    echo "PartitionName=$g Nodes=$(hostlist "$g") Default=$default MaxTime=INFINITE State=UP" >>"$conf"
    default=NO
  done < <(groups_)
}

start_controller() {  # controller
  local name=$1 conf g gc n
  conf=$(conf_of "$name")
  COORM_SLURM_BASE=$BASE SLURM_CONF=$conf slurmctld -i
  while read -r g _ gc; do
    [ "$gc" = "$name" ] || continue
    for n in $(node_names "$g"); do
      mkdir -p "$BASE/$name/state/d/$n"
      COORM_SLURM_BASE=$BASE SLURM_CONF=$conf slurmd -N "$n"
    done
  done < <(groups_)
}

wait_idle() {  # controller
  local name=$1 conf want got=0 _
  conf=$(conf_of "$name")
  want=$(grep -c '^PartitionName=' "$conf"); want=$((want * NODES))
  for _ in $(seq 600); do
    got=$(SLURM_CONF=$conf sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l || true)
    if [ "$got" -ge "$want" ]; then log "cluster $name: $got/$want nodes idle"; return; fi
    sleep 0.1
  done
  SLURM_CONF=$conf sinfo -N -o '%N %T %E' >&2 || true
  die "cluster $name: only $got/$want nodes idle after 60 s"
}

wait_registered() {  # with slurmdbd: every slurmctld has registered its address (-M works)
  local conf want got _
  conf=$(conf_of "$(first_controller)")
  want=$(controllers | wc -l)
  for _ in $(seq 300); do
    got=$(SLURM_CONF=$conf sacctmgr -n -P list cluster format=cluster,controlport 2>/dev/null |
      awk -F'|' '$2 > 0' | wc -l || true)
    [ "$got" -ge "$want" ] && return
    sleep 0.1
  done
  die "only $got/$want clusters registered with slurmdbd after 30 s"
}

start_rest() {  # controller index
  local name=$1 i=$2 conf plugins=openapi/v0.0.38,openapi/v0.0.37 sock=$BASE/$1/run/slurmrestd.sock
  conf=$(conf_of "$name")
  [ "$DBD" = 1 ] && plugins+=,openapi/dbv0.0.38
  # 1) Unix socket, rest_auth/local (peer uid via SO_PEERCRED); as root it needs the override.
  COORM_SLURM_BASE=$BASE SLURM_CONF=$conf SLURMRESTD_SECURITY=disable_user_check \
    nohup slurmrestd -a rest_auth/local -s "$plugins" "unix:$sock" \
    </dev/null >"$BASE/$name/log/slurmrestd-local.log" 2>&1 &
  echo $! >"$BASE/$name/run/slurmrestd-local.pid"
  # 2) TCP on loopback, rest_auth/jwt, unprivileged (setpriv execs: $! is slurmrestd itself).
  #    SLURM_JWT=daemon is required, else "error: Rejecting thread config token for user root".
  COORM_SLURM_BASE=$BASE SLURM_CONF=$conf SLURM_JWT=daemon \
    nohup setpriv --reuid=nobody --regid=nogroup --clear-groups \
    slurmrestd -a rest_auth/jwt -s "$plugins" "127.0.0.1:$(rest_port "$i")" \
    </dev/null >"$BASE/$name/log/slurmrestd-jwt.log" 2>&1 &
  echo $! >"$BASE/$name/run/slurmrestd-jwt.pid"
}

wait_rest() {  # controller index
  local name=$1 i=$2 _ port
  port=$(rest_port "$i")
  for _ in $(seq 100); do
    if curl -sf --unix-socket "$BASE/$name/run/slurmrestd.sock" http://localhost/slurm/v0.0.38/ping \
         >/dev/null 2>&1 && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      log "slurmrestd $name: unix:$BASE/$name/run/slurmrestd.sock and http://127.0.0.1:$port"
      return
    fi
    sleep 0.1
  done
  die "slurmrestd for $name did not answer within 10 s"
}

write_env() {
  local name i g
  {
    echo "# written by slurm-local.sh up; source it"
    echo "export COORM_SLURM_BASE=$BASE"
    echo "export COORM_SLURM_MODE=$MODE"
    echo "export COORM_SLURM_PORT_BASE=$PORT_BASE"
    echo "export COORM_SLURM_DBD=$DBD"
    echo "export COORM_SLURM_REST=$REST"
    echo "export COORM_SLURM_NODES=$NODES"
    echo "export COORM_SLURM_CLUSTERS=\"$CLUSTERS\""
    echo "export COORM_SLURM_CONTROLLERS=\"$(controllers | cut -d' ' -f1 | paste -sd' ')\""
    echo "export SLURM_CONF=$(conf_of "$(first_controller)")"
    while read -r name i; do
      echo "export SLURM_CONF_$name=$(conf_of "$name")"
      if [ "$REST" = 1 ]; then
        echo "export SLURMRESTD_SOCK_$name=$BASE/$name/run/slurmrestd.sock"
        echo "export SLURMRESTD_URL_$name=http://127.0.0.1:$(rest_port "$i")"
      fi
    done < <(controllers)
    while read -r g _ name; do
      echo "export COORM_SLURM_NODES_$g=\"$(hostlist "$g")\""
      echo "export COORM_SLURM_CONTROLLER_$g=$name"
    done < <(groups_)
  } >"$BASE/env.sh.tmp"
  mv "$BASE/env.sh.tmp" "$BASE/env.sh"
}

show_logs() {
  local f
  for f in "$BASE"/log/*.log "$BASE"/*/log/slurmctld.log "$BASE"/*/log/slurmrestd-*.log; do
    [ -s "$f" ] && [ "$(basename "$f")" != mariadb-install.log ] || continue
    echo "----- tail of $f" >&2; tail -n 25 "$f" >&2
  done
  # the slurmd logs that report an error (at most 3)
  { grep -l -E 'error|fatal' "$BASE"/*/log/slurmd-*.log 2>/dev/null || true; } | head -3 |
    while read -r f; do echo "----- tail of $f" >&2; tail -n 15 "$f" >&2; done
  return 0
}

IN_UP=0
on_exit() {
  local rc=$?
  set +e
  if [ "$IN_UP" = 1 ] && [ "$rc" != 0 ] && [ "$rc" != 3 ] && [ "$rc" != 4 ]; then
    show_logs
    if [ "$KEEP_ON_FAIL" = 1 ]; then log "up failed: daemons left running (KEEP_ON_FAIL=1)"
    else log "up failed: stopping what was started"; IN_UP=0; cmd_down || true; fi
  fi
  exit "$rc"
}

cmd_up() {
  local t0=$SECONDS pidf name i
  if [ -e "$BASE" ]; then
    if [ -e "$BASE/$MARKER" ]; then
      for pidf in $(find "$BASE" -name '*.pid' 2>/dev/null); do
        pid_is_ours "$(cat "$pidf" 2>/dev/null)" && die "$pidf is alive: run '$0 down' first" 4
      done
    elif [ -n "$(ls -A "$BASE" 2>/dev/null)" ]; then
      die "BASE=$BASE exists, is not empty and was not made by this script: not wiping it" 4
    fi
  fi
  check_ports
  rm -rf "$BASE"
  mkdir -p "$BASE"/{etc,run,log}
  touch "$BASE/$MARKER"
  IN_UP=1
  # slurmrestd (JWT) runs as nobody and must read the configuration
  chmod 0755 "$BASE" "$BASE/etc"
  dd if=/dev/urandom of="$BASE/etc/jwt_hs256.key" bs=32 count=1 2>/dev/null
  chmod 0600 "$BASE/etc/jwt_hs256.key"
  STORAGE_LOC=coorm_slurm_acct_$PORT_BASE
  start_munge
  while read -r name i; do write_conf "$name" "$i"; done < <(controllers)
  if [ "$DBD" = 1 ]; then start_mariadb; start_slurmdbd; fi
  while read -r name _; do start_controller "$name"; done < <(controllers)
  if [ "$REST" = 1 ]; then
    while read -r name i; do start_rest "$name" "$i"; done < <(controllers)
  fi
  while read -r name _; do wait_idle "$name"; done < <(controllers)
  [ "$DBD" = 1 ] && wait_registered
  if [ "$REST" = 1 ]; then
    while read -r name i; do wait_rest "$name" "$i"; done < <(controllers)
  fi
  write_env
  IN_UP=0
  log "up in $((SECONDS - t0)) s: MODE=$MODE CLUSTERS='$CLUSTERS' NODES=$NODES DBD=$DBD REST=$REST PORT_BASE=$PORT_BASE"
  log "source $BASE/env.sh"
}

# ---------------------------------------------------------------- down
kill_pidfiles() {  # signal pidfile... -> prints the PIDs signalled
  local sig=$1 pidf pid comm; shift
  for pidf in "$@"; do
    [ -f "$pidf" ] || continue
    pid=$(cat "$pidf" 2>/dev/null) || continue
    case $(basename "$pidf") in
      munged.pid) comm=munged ;; mariadbd.pid) comm=mariadbd ;; slurmdbd.pid) comm=slurmdbd ;;
      slurmctld.pid) comm=slurmctld ;; slurmd-*.pid) comm=slurmd ;; slurmrestd-*.pid) comm=slurmrestd ;;
      *) continue ;;
    esac
    if pid_is_ours "$pid" "$comm"; then kill "-$sig" "$pid" 2>/dev/null && echo "$pid"; fi
  done
}

other_slurm_alive() {  # a Slurm daemon that is not ours still runs on this host
  local d comm
  for d in /proc/[0-9]*; do
    comm=$(cat "$d/comm" 2>/dev/null) || continue
    case $comm in slurmctld|slurmd|slurmdbd|slurmrestd|slurmstepd) ;; *) continue ;; esac
    # A zombie (an exited daemon not reaped yet) uses nothing: its environ is unreadable.
    [ "$(awk '{print $3}' "$d/stat" 2>/dev/null)" = Z ] && continue
    environ_is_ours "${d#/proc/}" || return 0
  done
  return 1
}

cmd_down() {
  if [ ! -e "$BASE/$MARKER" ]; then log "down: nothing started under $BASE"; return 0; fi
  local conf pids=() stepds=() p _
  # cancel the jobs first, so that no slurmstepd outlives its slurmd
  for conf in "$BASE"/etc/*.conf; do
    [ "$(basename "$conf")" = slurmdbd.conf ] && continue
    pid_is_ours "$(cat "$(sed -n 's/^SlurmctldPidFile=//p' "$conf")" 2>/dev/null)" slurmctld || continue
    SLURM_CONF=$conf timeout 10 squeue -h -o %A 2>/dev/null |
      xargs -r env SLURM_CONF="$conf" timeout 10 scancel 2>/dev/null || true
    for _ in $(seq 100); do
      [ -z "$(SLURM_CONF=$conf timeout 5 squeue -h -t R,CG,S -o %A 2>/dev/null)" ] && break; sleep 0.1
    done
  done
  # REST, slurmd, slurmctld first; then slurmdbd, mariadb; munged last
  local front=() back=()
  mapfile -t front < <(find "$BASE" -name 'slurmrestd-*.pid'; find "$BASE" -name 'slurmd-*.pid';
                       find "$BASE" -name slurmctld.pid)
  mapfile -t pids < <(kill_pidfiles TERM "${front[@]}")
  wait_gone 10 "${pids[@]}" || mapfile -t -O "${#pids[@]}" pids < <(kill_pidfiles KILL "${front[@]}")
  if [ -f "$BASE/run/slurmdbd.pid" ]; then
    mapfile -t back < <(kill_pidfiles TERM "$BASE/run/slurmdbd.pid")
    wait_gone 10 "${back[@]}" || kill_pidfiles KILL "$BASE/run/slurmdbd.pid" >/dev/null
    pids+=("${back[@]}")
  fi
  local mode db
  read -r mode db 2>/dev/null <"$BASE/run/mariadb.mode" || true
  if [ "${mode:-}" = reused ] && [ -n "${db:-}" ]; then
    mariadb -e "DROP DATABASE IF EXISTS $db" 2>/dev/null || log "down: could not drop database $db"
  fi
  if [ -f "$BASE/run/mariadbd.pid" ]; then
    mapfile -t back < <(kill_pidfiles TERM "$BASE/run/mariadbd.pid")
    wait_gone 30 "${back[@]}" || kill_pidfiles KILL "$BASE/run/mariadbd.pid" >/dev/null
    pids+=("${back[@]}")
  fi
  # whatever of ours is left: slurmstepd (and the processes of its jobs), slurmscriptd, ...
  mapfile -t stepds < <(stray_daemons)
  if [ "${#stepds[@]}" -gt 0 ]; then
    # shellcheck disable=SC2207
    stepds+=($(children_of "${stepds[@]}"))
    for p in "${stepds[@]}"; do
      [ -d "/proc/$p" ] && [ "$p" != $$ ] && kill -9 "$p" 2>/dev/null && pids+=("$p")
    done
  fi
  if [ -f "$BASE/run/munged.pid" ]; then
    if [ "$MUNGE_STOP" != always ] && other_slurm_alive; then
      log "down: munged (ours) left running: another Slurm on this host may use it"
    else
      mapfile -t back < <(kill_pidfiles TERM "$BASE/run/munged.pid")
      pids+=("${back[@]}")
    fi
  fi
  rm -f "$BASE"/run/*.pid "$BASE"/*/run/*.pid "$BASE/env.sh"
  log "down: stopped ${#pids[@]} processes under $BASE"
}

cmd_munge() {  # munged alone, for several instances in a row: `down` with this BASE stops it
  [ -e "$BASE" ] && [ ! -e "$BASE/$MARKER" ] && [ -n "$(ls -A "$BASE" 2>/dev/null)" ] &&
    die "BASE=$BASE exists, is not empty and was not made by this script" 4
  mkdir -p "$BASE/run" "$BASE/log"
  touch "$BASE/$MARKER"
  start_munge
}

cmd_env() {
  [ -s "$BASE/env.sh" ] || { log "no $BASE/env.sh: run '$0 up' first"; echo "$BASE/env.sh"; exit 1; }
  echo "$BASE/env.sh"
}

set -E
trap 'log "command failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR
trap on_exit EXIT
case "${1:-}" in
  install) cmd_install ;;
  up) check_params; cmd_up ;;
  down) check_params; cmd_down ;;   # needs only BASE
  env) check_params; cmd_env ;;
  munge) check_params; cmd_munge ;;
  *) echo "usage: $0 install|up|down|env|munge   (parameters: see the head of this file)" >&2
     exit 2 ;;
esac
