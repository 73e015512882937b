#!/usr/bin/env bash
# The GRES-reservation experiment of "One GPU out of service" (docs/admin-guide.md) with slurmdbd,
# which a reservation of a GRES needs (its TRES must be in AccountingStorageTRES, and slurmctld does
# not start with a GRES TRES without slurmdbd). Run inside a chroot's test cluster, against the
# MariaDB of tests/services/db-servers.sh (127.0.0.1:13306, user pal):
#
#   tests/services/db-servers.sh start
#   PAL_OTHER_SLURM_SUITE=trixie tests/services/other-slurm.sh run tests/services/quarantine-slurmdbd.sh trixie 23819
#   PAL_OTHER_SLURM_SUITE=sid tests/services/other-slurm.sh run tests/services/quarantine-slurmdbd.sh sid 22819
#
# Arguments: a tag for the database (pal_test_slurmdbd_<tag>), slurmdbd's port, and `skip` to leave
# out the first step (slurmctld started with AccountingStorageTRES=gres/gpu and no slurmdbd). It
# installs slurmdbd in the chroot (apt) where missing, runs it from /var/tmp/pal-exp-dbd, restarts
# the cluster with accounting through it, runs `quarantine-experiments.sh b`, then restarts the
# cluster without it and stops slurmdbd (its database stays: the last line says how to drop it).
# Prints every command and its answer.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CL="$REPO/tests/services/slurm-cluster.sh"
DIR="$PAL_TEST_SLURM_DIR"
SUITE_TAG="${1:?suite}"
DBD_PORT="${2:?dbd port}"
DB="pal_test_slurmdbd_$SUITE_TAG"
SU="$(sed -n 's/^SlurmUser=//p' "$DIR/etc/slurm.conf")"
say() { printf '%s\n' "$*"; }
run() { say "\$ $*"; OUT="$("$@" 2>&1)"; RC=$?; [ -z "$OUT" ] || printf '%s\n' "$OUT" | sed 's/^/    /'; say "    (exit $RC)"; }
say "# slurmdbd experiment: Slurm $(sinfo --version), SlurmUser $SU"
if [ "${3:-}" != skip ]; then
    say "## AccountingStorageTRES=gres/gpu without slurmdbd"
    PAL_TEST_SLURM_CONF_EXTRA="AccountingStorageTRES=gres/gpu" PAL_TEST_SLURM_WAIT=15 run "$CL" start
    grep -h "fatal" "$DIR/log/slurmctld.log" | tail -n 1 | sed 's/^/    log: /'
    "$CL" start >/dev/null 2>&1
    say "    (restored: $(sinfo -h -o '%D nodes %T' | head -n1))"
fi
command -v slurmdbd >/dev/null || run apt-get install -y -q --no-install-recommends slurmdbd
DBDDIR=/var/tmp/pal-exp-dbd
install -d -o "$SU" -m 0700 "$DBDDIR"
cat >"$DBDDIR/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=$SU
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=13306
StorageUser=pal
StoragePass=paltest
StorageLoc=$DB
LogFile=$DBDDIR/slurmdbd.log
PidFile=$DBDDIR/slurmdbd.pid
DebugLevel=info
CONF
chown "$SU:" "$DBDDIR/slurmdbd.conf"; chmod 600 "$DBDDIR/slurmdbd.conf"
say "\$ SLURM_CONF=$DBDDIR/slurm.conf slurmdbd -D &   # slurmdbd reads slurmdbd.conf beside SLURM_CONF"
SLURM_CONF="$DBDDIR/slurm.conf" setsid slurmdbd -D >"$DBDDIR/slurmdbd.out" 2>&1 &
DBD=$!
for i in $(seq 60); do (exec 3<>"/dev/tcp/127.0.0.1/$DBD_PORT") 2>/dev/null && break; sleep 1; done
tail -n 3 "$DBDDIR/slurmdbd.log" "$DBDDIR/slurmdbd.out" 2>&1 | sed 's/^/    log: /'
TYPES="gres/gpu,$(for m in 0 1 2 3; do printf 'gres/gpu:v100_g%s,' "$m"; done | sed 's/,$//')"
export PAL_TEST_SLURM_CONF_EXTRA="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStorageTRES=$TYPES"
say "# slurm.conf gets: $(printf '%s' "$PAL_TEST_SLURM_CONF_EXTRA" | tr '\n' ' ')"
# slurmdbd gives the cluster an id of its own; the state dir remembers the old one (a safety check)
run rm -f "$DIR/state/clustername"
run "$CL" start
run sacctmgr -i add cluster paltest
run sacctmgr -i add account palexp Cluster=paltest
run sacctmgr -i add user root Account=palexp Cluster=paltest
run "$CL" restart-ctld
run scontrol show config
printf '%s\n' "$OUT" | grep -E "AccountingStorage(Type|TRES)" | sed 's/^/    /'
run scontrol show node pal-n4
printf '%s\n' "$OUT" | grep -E "CfgTRES" | sed 's/^/    /'
bash "$REPO/tests/services/quarantine-experiments.sh" b
say "# restoring the cluster without slurmdbd"
unset PAL_TEST_SLURM_CONF_EXTRA
"$CL" start >/dev/null 2>&1
kill "$DBD" 2>/dev/null; wait "$DBD" 2>/dev/null
say "restored: $(scontrol show config | grep AccountingStorageType)"
say "left: database $DB (drop it: mariadb -h 127.0.0.1 -P 13306 -u pal -ppaltest -e 'DROP DATABASE $DB'),"
say "      the slurmdbd package and /var/tmp/pal-exp-dbd in the chroot"

