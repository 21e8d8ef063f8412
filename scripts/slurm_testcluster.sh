#!/usr/bin/env bash
# A throw-away Slurm cluster on this one host, for trainc's tests and CI (Debian 12, run as root).
#
#   bash scripts/slurm_testcluster.sh install   # apt-get the daemons if missing (idempotent)
#   eval "$(bash scripts/slurm_testcluster.sh start)"   # start; prints the exports clients need
#   bash scripts/slurm_testcluster.sh status    # sinfo + squeue; exit 1 when the controller is down
#   bash scripts/slurm_testcluster.sh env       # print the exports again
#   bash scripts/slurm_testcluster.sh stop      # cancel jobs, stop every daemon by its PID
#
# One munged, one slurmctld and one slurmd per emulated node (Debian's Slurm is built with
# multiple-slurmd: `slurmd -N n1`), all on 127.0.0.1 with ports checked free at start, everything
# (config, munge key and socket, state, pid files, logs) under one temporary directory ROOT.
# Nothing is written to /etc/slurm or /etc/munge; the only system file touched is /etc/hosts, which
# gets one tagged line so that the emulated node names resolve (removed again by stop).
#
# `start` prints, on stdout and nothing else:
#   export TRAINC_SLURM_ROOT=/tmp/trainc-slurm.XXXXXX
#   export SLURM_CONF=/tmp/trainc-slurm.XXXXXX/etc/slurm.conf
# `stop`, `status` and `env` find the cluster through TRAINC_SLURM_ROOT (or SLURM_CONF).
#
# Knobs (environment, all optional):
#   TRAINC_SLURM_ROOT        cluster directory (default: a fresh mktemp -d /tmp/trainc-slurm.XXXXXX)
#   TRAINC_SLURM_NODES=2     emulated nodes n1..nN that run a slurmd
#   TRAINC_SLURM_SPARE=62    more nodes configured but never started (State=CLOUD, powered down):
#                            `sbatch --test-only` of big specs is answered against NODES+SPARE
#                            nodes; jobs only ever run on the started ones
#   TRAINC_SLURM_CPUS=64     CPUs advertised per node, TRAINC_SLURM_MEM_MB=1000000 memory per node
#                            (both may exceed the real machine: SlurmdParameters=config_overrides)
#   TRAINC_SLURM_GPUS=8      fake GPUs per node (gres/gpu backed by mknod'ed char devices; 0: none)
#   TRAINC_SLURM_PARTITIONS="debug batch"   partitions over all nodes; the first is the default
#   TRAINC_SLURM_AUTH=munge  munge | none (auth/none fallback: no munged, insecure, tests only)
#   TRAINC_SLURM_KEEP=0      1: stop keeps ROOT (logs) instead of deleting it
#   TRAINC_SLURM_PACKAGES    extra Debian packages for `install` (default: shellcheck)
set -euo pipefail

PKGS="slurmctld slurmd slurm-client munge"
EXTRA_PKGS=${TRAINC_SLURM_PACKAGES-shellcheck}
NODES=${TRAINC_SLURM_NODES:-2}
SPARE=${TRAINC_SLURM_SPARE:-62}
NODE_CPUS=${TRAINC_SLURM_CPUS:-64}
NODE_MEM=${TRAINC_SLURM_MEM_MB:-1000000}
GPUS=${TRAINC_SLURM_GPUS:-8}
PARTITIONS=${TRAINC_SLURM_PARTITIONS:-debug batch}
AUTH=${TRAINC_SLURM_AUTH:-munge}
KEEP=${TRAINC_SLURM_KEEP:-0}
HOSTS_TAG="# trainc-slurm-testcluster"
ME=$(basename "$0")

say() { echo "$ME: $*" >&2; }
die() { say "$*"; exit 1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# --- where the cluster lives ---------------------------------------------------------------------
find_root() {  # sets ROOT from TRAINC_SLURM_ROOT, else from a SLURM_CONF that this script wrote
  ROOT=${TRAINC_SLURM_ROOT:-}
  if [ -z "$ROOT" ] && [ -n "${SLURM_CONF:-}" ] && [ -f "${SLURM_CONF%/etc/slurm.conf}/.trainc-slurm" ]; then
    ROOT=${SLURM_CONF%/etc/slurm.conf}
  fi
  CONF=${ROOT:+$ROOT/etc/slurm.conf}
}

pid_alive() {  # pid_alive FILE: the PID in FILE runs and is one of this cluster's daemons
  local f=$1 pid
  [ -s "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # guard against a recycled PID: the daemon's command line names this ROOT
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$ROOT/"
}

controller_up() { [ -n "${CONF:-}" ] && pid_alive "$ROOT/run/slurmctld.pid"; }

print_env() {
  echo "export TRAINC_SLURM_ROOT=$ROOT"
  echo "export SLURM_CONF=$CONF"
}

# --- install ---------------------------------------------------------------------------------------
do_install() {
  local t0 missing="" p
  t0=$(now_ms)
  for p in $PKGS $EXTRA_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -z "$missing" ]; then say "packages already installed ($PKGS $EXTRA_PKGS)"; return; fi
  [ "$(id -u)" = 0 ] || die "installing$missing needs root (apt-get)"
  say "installing$missing"
  apt-get update -qq >&2
  # --no-install-recommends: 8 packages instead of the 43 of slurm-wlm; policy-rc.d keeps apt from
  # starting the system services (there is no systemd here anyway).
  # shellcheck disable=SC2086  # one word per package
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2
  say "installed in $(( $(now_ms) - t0 )) ms"
}

# --- start -------------------------------------------------------------------------------------------
free_ports() {  # free_ports N: N distinct TCP ports, free on 0.0.0.0 now, below the ephemeral range
  python3 - "$1" <<'EOF'
import random, socket, sys
n, got = int(sys.argv[1]), []
while len(got) < n:
    port = random.randint(20000, 32000)
    if port in got:
        continue
    try:
        with socket.socket() as s:
            s.bind(("0.0.0.0", port))
    except OSError:
        continue
    got.append(port)
print(" ".join(map(str, got)))
EOF
}

node_names() { local i; for ((i = 1; i <= NODES; i++)); do echo "n$i"; done; }
all_node_names() { local i; for ((i = 1; i <= NODES + SPARE; i++)); do echo "n$i"; done; }

write_conf() {  # write_conf PORT... (controller first, then one per node)
  local ports=("$@") host auth cred gres="" i part first=1
  host=$(hostname -s)
  mkdir -p "$ROOT/etc" "$ROOT/run" "$ROOT/log" "$ROOT/state/ctld" "$ROOT/tmp"
  for n in $(all_node_names); do mkdir -p "$ROOT/state/d/$n"; done
  if [ "$AUTH" = none ]; then auth=auth/none; cred=cred/none; else auth=auth/munge; cred=cred/munge; fi
  [ "$GPUS" -gt 0 ] && gres=" Gres=gpu:$GPUS"
  {
    echo "# written by trainc's $ME start; ROOT=$ROOT"
    echo "ClusterName=trainc-test"
    echo "SlurmctldHost=$host(127.0.0.1)"
    echo "SlurmctldPort=${ports[0]}"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=$auth"
    echo "CredType=$cred"
    [ "$AUTH" = none ] || echo "AuthInfo=socket=$ROOT/run/munge.socket"
    cat <<EOF
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
StateSaveLocation=$ROOT/state/ctld
SlurmdSpoolDir=$ROOT/state/d/%n
SlurmctldPidFile=$ROOT/run/slurmctld.pid
SlurmdPidFile=$ROOT/run/slurmd-%n.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=600
KillWait=5
Waittime=0
MailProg=/bin/true
TmpFS=$ROOT/tmp
ResumeProgram=/bin/true
ResumeTimeout=3600
EOF
    [ "$GPUS" -gt 0 ] && echo "GresTypes=gpu"
    for ((i = 1; i <= NODES; i++)); do
      echo "NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=${ports[$i]} CPUs=$NODE_CPUS RealMemory=$NODE_MEM$gres Weight=1 State=UNKNOWN"
    done
    # Spare nodes: powered-down cloud nodes, so that `sbatch --test-only` counts them. They never
    # come up (no slurmd is started for them; slurmd started by slurmctld's ResumeProgram never
    # registers): a job that lands there stays CONFIGURING. The higher Weight keeps jobs on the
    # started nodes when those are free; pin real jobs with --nodelist=n[1-N] to be sure.
    for ((i = NODES + 1; i <= NODES + SPARE; i++)); do
      echo "NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=${ports[$i]} CPUs=$NODE_CPUS RealMemory=$NODE_MEM$gres Weight=1000 State=CLOUD"
    done
    for part in $PARTITIONS; do
      if [ $first = 1 ]; then def=YES; first=0; else def=NO; fi
      echo "PartitionName=$part Nodes=ALL Default=$def MaxTime=INFINITE State=UP"
    done
  } > "$CONF"
  rm -f "$ROOT/etc/gres.conf"
  if [ "$GPUS" -gt 0 ]; then
    # gres/gpu needs File= naming character devices; Slurm only stat()s them (no cgroups here).
    mkdir -p "$ROOT/dev"
    for ((i = 0; i < GPUS; i++)); do
      [ -c "$ROOT/dev/nvidia$i" ] || mknod "$ROOT/dev/nvidia$i" c 195 "$i"
    done
    echo "Name=gpu File=$ROOT/dev/nvidia[0-$((GPUS - 1))]" > "$ROOT/etc/gres.conf"
  fi
}

hosts_del() {  # remove this ROOT's line; rewrite in place (keeps the inode: /etc/hosts may be a bind mount)
  local t
  if grep -qF "$HOSTS_TAG $ROOT" /etc/hosts 2>/dev/null; then
    t=$(grep -vF "$HOSTS_TAG $ROOT" /etc/hosts || true)
    printf '%s\n' "$t" > /etc/hosts
  fi
}

hosts_add() {  # emulated node names must resolve: scripts rendezvous on the first node's name
  hosts_del
  echo "127.0.0.1 $(all_node_names | tr '\n' ' ')$HOSTS_TAG $ROOT" >> /etc/hosts
}

start_daemons() {
  if [ "$AUTH" != none ]; then
    install -d -m 0700 "$ROOT/run/munge"
    if [ ! -s "$ROOT/run/munge/munge.key" ]; then
      dd if=/dev/urandom of="$ROOT/run/munge/munge.key" bs=1024 count=1 status=none
      chmod 0400 "$ROOT/run/munge/munge.key"
    fi
    /usr/sbin/munged --force --socket="$ROOT/run/munge.socket" --key-file="$ROOT/run/munge/munge.key" \
      --pid-file="$ROOT/run/munge/munged.pid" --log-file="$ROOT/log/munged.log" \
      --seed-file="$ROOT/run/munge/munged.seed" || return 1
  fi
  # -c: start with no saved jobs; -i: ignore state errors. Both daemonize and write their pid file.
  /usr/sbin/slurmctld -c -i -f "$CONF" || return 1
  for n in $(node_names); do /usr/sbin/slurmd -f "$CONF" -N "$n" || return 1; done
}

wait_idle() {  # every started node idle within 60 s
  local want st i
  want=$(for n in $(node_names); do echo "$n idle"; done | sort | tr '\n' ' ')
  for ((i = 0; i < 240; i++)); do
    st=$(sinfo -h -N -p "${PARTITIONS%% *}" -o '%N %t' -n "n[1-$NODES]" 2>/dev/null | sort -u | tr '\n' ' ') || true
    [ "$st" = "$want" ] && return 0
    sleep 0.25
  done
  say "nodes did not become idle (sinfo: ${st:-no answer}); logs in $ROOT/log"
  return 1
}

do_start() {
  local t0 attempt ports
  if [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/slurmd ] || ! command -v sinfo >/dev/null; then
    die "Slurm is not installed: run '$0 install' first"
  fi
  [ "$AUTH" = none ] || [ -x /usr/sbin/munged ] || die "munge is not installed: run '$0 install' first"
  [ "$(id -u)" = 0 ] || die "start needs root (SlurmUser=root, /etc/hosts, mknod)"
  [ "$NODES" -ge 1 ] || die "TRAINC_SLURM_NODES must be >= 1"
  find_root
  if [ -n "$ROOT" ] && controller_up; then
    say "already running (ROOT=$ROOT)"; print_env; return 0
  fi
  if [ -n "$ROOT" ] && [ -d "$ROOT" ]; then
    [ -f "$ROOT/.trainc-slurm" ] || [ -z "$(ls -A "$ROOT")" ] \
      || die "$ROOT is not empty and not a trainc test cluster; refusing to use it"
    stop_daemons   # leftovers of a half-dead earlier start
  else
    ROOT=${ROOT:-$(mktemp -d /tmp/trainc-slurm.XXXXXX)}
    mkdir -p "$ROOT"
  fi
  chmod 0755 "$ROOT"
  touch "$ROOT/.trainc-slurm"
  CONF=$ROOT/etc/slurm.conf
  export SLURM_CONF=$CONF
  t0=$(now_ms)
  for attempt in 1 2 3; do   # a port can be taken between the check and the bind: retry
    read -r -a ports <<< "$(free_ports $((NODES + SPARE + 1)))"
    write_conf "${ports[@]}"
    hosts_add
    if start_daemons && wait_idle; then
      say "up in $(( $(now_ms) - t0 )) ms: $NODES node(s) n[1-$NODES], partitions '$PARTITIONS', controller port ${ports[0]}, ROOT=$ROOT"
      print_env
      return 0
    fi
    say "start attempt $attempt failed; log tails:"
    tail -n 5 "$ROOT"/log/*.log >&2 2>/dev/null || true
    stop_daemons
  done
  hosts_del
  die "could not start the cluster (logs in $ROOT/log)"
}

# --- stop --------------------------------------------------------------------------------------------
stop_pids() {  # stop_pids FILE...: TERM each live daemon named in FILE, wait <= 15 s, then KILL
  local f pid pids=() alive i
  for f in "$@"; do
    if pid_alive "$f"; then pid=$(cat "$f"); kill -TERM "$pid" 2>/dev/null && pids+=("$pid"); fi
  done
  for ((i = 0; i < 150 && ${#pids[@]} > 0; i++)); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then say "force-killing $pid"; kill -KILL "$pid" 2>/dev/null || true; fi
  done
  rm -f "$@"
}

stop_daemons() {
  local ids i
  shopt -s nullglob
  if controller_up; then   # jobs first, so that no slurmstepd or job process outlives the daemons
    ids=$(SLURM_CONF=$CONF squeue -h -o %i 2>/dev/null || true)
    if [ -n "$ids" ]; then
      # shellcheck disable=SC2086  # one word per job id
      SLURM_CONF=$CONF scancel --full $ids 2>/dev/null || true
      for ((i = 0; i < 80; i++)); do
        [ -z "$(SLURM_CONF=$CONF squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.25
      done
    fi
  fi
  stop_pids "$ROOT"/run/slurmd-*.pid "$ROOT/run/slurmctld.pid"
  stop_pids "$ROOT/run/munge/munged.pid"
  shopt -u nullglob
}

do_stop() {
  local t0
  find_root
  if [ -z "$ROOT" ] || [ ! -f "$ROOT/.trainc-slurm" ]; then
    say "no test cluster to stop (TRAINC_SLURM_ROOT and SLURM_CONF name none)"; return 0
  fi
  t0=$(now_ms)
  stop_daemons
  hosts_del
  if [ "$KEEP" = 1 ]; then
    say "stopped in $(( $(now_ms) - t0 )) ms; kept $ROOT (logs in $ROOT/log)"
  else
    rm -rf "$ROOT"
    say "stopped in $(( $(now_ms) - t0 )) ms; removed $ROOT"
  fi
}

do_status() {
  find_root
  if [ -z "$ROOT" ] || ! controller_up; then say "no test cluster running${ROOT:+ (ROOT=$ROOT)}"; return 1; fi
  SLURM_CONF=$CONF sinfo
  SLURM_CONF=$CONF squeue
}

do_env() {
  find_root
  if [ -z "$ROOT" ] || [ ! -f "$ROOT/.trainc-slurm" ]; then die "no test cluster known: set TRAINC_SLURM_ROOT"; fi
  print_env
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  env) do_env ;;
  *) echo "usage: $0 install|start|stop|status|env" >&2; exit 2 ;;
esac
