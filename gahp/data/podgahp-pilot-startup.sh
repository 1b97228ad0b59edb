#!/bin/sh
# podgahp-pilot-startup.sh: the pilot that `podgahp provision` submits to the CE.
#
# Runs in the pilot's pod (or Lancium job) and joins the user pool as one startd. Everything comes
# from the environment the provisioner sets (the OSG backfill image's variables, so that image can
# be used instead of this script):
#   CONDOR_HOST            the pool's collector (host[:port])
#   NUM_CPUS, MEMORY       cores and MiB of the slot; NUM_GPUS, DISK (KiB) when asked for
#   ACCEPT_IDLE_MINUTES    the startd shuts down when unclaimed this long
#   ACCEPT_JOBS_FOR_HOURS  no new job starts after this
#   PODGAHP_PILOT_KIND     shaped (one static slot) or partitionable (one partitionable slot)
#   PODGAHP_PILOT_GROUP    the group it serves (advertised as PodgahpGroup)
#   PODGAHP_PILOT_START    which jobs it starts (the START expression)
#   PODGAHP_PILOT_PROVISIONER, PODGAHP_PILOT_ID  the provisioner's name and the pilot's job id at
#                          the CE, advertised (PodgahpProvisioner, PodgahpPilotId) so that the
#                          provisioner counts the pilot idle or busy in the pool
# The pool's credential (an IDTOKEN) is read from $PODGAHP_PILOT_TOKEN_FILE, default
# ./pilot.token (an input file of the pilot), and removed once copied. The startd authenticates
# with it to the pool. The daemons' logs are copied to stdout (the pod's log); SIGTERM is passed to
# condor_master, whose graceful shutdown vacates the running job so that it runs again elsewhere.
#
#   podgahp-pilot-startup.sh --print-config   prints the configuration and exits
set -eu

fail() { echo "podgahp-pilot-startup: $*" >&2; exit 1; }
number() { case "$2" in ''|*[!0-9]*) fail "$1 must be a whole number, not '$2'";; esac; }

: "${CONDOR_HOST:?the pool to join (CONDOR_HOST) is not set}"
NUM_CPUS=${NUM_CPUS:-1}; MEMORY=${MEMORY:-2048}; NUM_GPUS=${NUM_GPUS:-0}; DISK=${DISK:-0}
ACCEPT_IDLE_MINUTES=${ACCEPT_IDLE_MINUTES:-20}; ACCEPT_JOBS_FOR_HOURS=${ACCEPT_JOBS_FOR_HOURS:-24}
for v in NUM_CPUS MEMORY NUM_GPUS DISK ACCEPT_IDLE_MINUTES ACCEPT_JOBS_FOR_HOURS; do
    eval "number $v \"\$$v\""
done
KIND=${PODGAHP_PILOT_KIND:-shaped}
case "$KIND" in shaped|partitionable) ;; *) fail "PODGAHP_PILOT_KIND must be shaped or partitionable";; esac
START=${PODGAHP_PILOT_START:-true}
case "$START" in *"
"*) fail "PODGAHP_PILOT_START must be one line";; esac
# The configuration written below expands $(...): values from the environment hold no $ (the
# provisioner writes a $ in a ClassAd string as \044).
case "$START" in *'$'*) fail "PODGAHP_PILOT_START must not contain \$";; esac
case "$CONDOR_HOST" in *'$'*|*' '*|*'"'*) fail "CONDOR_HOST must be host[:port]";; esac
GROUP=$(printf '%s' "${PODGAHP_PILOT_GROUP:-}" | tr -d '"\\\n$')
PROVISIONER=$(printf '%s' "${PODGAHP_PILOT_PROVISIONER:-}" | tr -d '"\\\n$')
PILOT_ID=${PODGAHP_PILOT_ID:-}
case "$PILOT_ID" in ''|*[!0-9.]*) PILOT_ID="";; esac

BASE=${PODGAHP_PILOT_DIR:-$PWD/podgahp-pilot}
# Where the image's HTCondor lives (a package's /usr, or an unpacked tarball)
RELEASE=$(dirname "$(dirname "$(command -v condor_master || echo /usr/sbin/condor_master)")")
LIBEXEC=$RELEASE/libexec/condor
[ -d "$LIBEXEC" ] || LIBEXEC=$RELEASE/libexec
config() {
    now=$(date +%s)
    cat <<CONFIG
RELEASE_DIR = $RELEASE
LIBEXEC = $LIBEXEC
CONDOR_HOST = $CONDOR_HOST
DAEMON_LIST = MASTER, STARTD
LOCAL_DIR = $BASE
LOG = \$(LOCAL_DIR)/log
EXECUTE = \$(LOCAL_DIR)/execute
SPOOL = \$(LOCAL_DIR)/spool
LOCK = \$(LOCAL_DIR)/lock
RUN = \$(LOCAL_DIR)/run
USE_SHARED_PORT = False
SEC_USE_FAMILY_SESSION = False
SEC_CLIENT_AUTHENTICATION = PREFERRED
SEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS, FS
RunBenchmarks = False
SEC_TOKEN_DIRECTORY = \$(LOCAL_DIR)/tokens.d
NUM_CPUS = $NUM_CPUS
MEMORY = $MEMORY
PodgahpGroup = "$GROUP"
PodgahpProvisioner = "$PROVISIONER"
PodgahpPilotId = "$PILOT_ID"
PodgahpPilotRetireTime = $((now + ACCEPT_JOBS_FOR_HOURS * 3600))
STARTD_ATTRS = \$(STARTD_ATTRS) PodgahpGroup PodgahpProvisioner PodgahpPilotId PodgahpPilotRetireTime
START = (time() < PodgahpPilotRetireTime) && ($START)
STARTD_NOCLAIM_SHUTDOWN = $((ACCEPT_IDLE_MINUTES * 60))
CONFIG
    gpus=""
    if [ "$NUM_GPUS" -gt 0 ]; then
        gpus=", gpus=100%"
        echo "use feature : GPUs"
    fi
    echo "SLOT_TYPE_1 = cpus=100%, memory=100%, disk=100%$gpus"
    if [ "$KIND" = partitionable ]; then
        echo "SLOT_TYPE_1_PARTITIONABLE = True"
    else
        echo "SLOT_TYPE_1_PARTITIONABLE = False"
    fi
    echo "NUM_SLOTS_TYPE_1 = 1"
}

if [ "${1:-}" = "--print-config" ]; then
    config
    exit 0
fi

command -v condor_master >/dev/null 2>&1 || fail "condor_master is not on PATH: use a pilot image with HTCondor"
mkdir -p "$BASE/log" "$BASE/execute" "$BASE/spool" "$BASE/lock" "$BASE/run" "$BASE/tokens.d"
chmod 0700 "$BASE/tokens.d"
TOKEN=${PODGAHP_PILOT_TOKEN_FILE:-$PWD/pilot.token}
if [ -f "$TOKEN" ]; then
    cp "$TOKEN" "$BASE/tokens.d/pool.token"
    chmod 0600 "$BASE/tokens.d/pool.token"
    rm -f "$TOKEN" 2>/dev/null || true  # a read-only mount keeps it; the copy is what HTCondor reads
fi
config > "$BASE/condor_config"
export CONDOR_CONFIG="$BASE/condor_config"
condor_master -f &
master=$!
trap 'kill -TERM "$master" 2>/dev/null || true' TERM INT
touch "$BASE/log/MasterLog" "$BASE/log/StartLog"
tail -F -n +1 --pid="$master" "$BASE/log/MasterLog" "$BASE/log/StartLog" 2>/dev/null &
status=0
wait "$master" || status=$?
while kill -0 "$master" 2>/dev/null; do  # a signal ended the wait, not the master
    status=0
    wait "$master" || status=$?
done
wait 2>/dev/null || true  # tail ends with the master
exit "$status"
