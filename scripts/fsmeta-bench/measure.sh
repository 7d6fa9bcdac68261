#!/bin/bash
# The metadata-step measurement of docs/replayer.md ("The metadata step"): ROUNDS interleaved rounds
# of a cold launch, a prefetched launch without the metadata step and one with it, on the emulated
# disk "fsmeta-FS" whose tree APP was recorded and analyzed in $S/FS.db; one line per launch
# (medians: med.py LOG).  PROG: readall | statread (built into $S from the .c files here).
# usage: measure.sh FS APP ROUNDS   (root)
export PYTHONPATH=$(cd "$(dirname "$0")/../.." && pwd)
FS=$1; APP=$2; N=${3:-3}; S=${S:-/tmp/fsmeta-scratch}; M=/run/warmstart-emu/fsmeta-$FS/mnt; DB=$S/$FS.db
for r in $(seq $N); do
  for v in cold data meta; do
    case $v in
      cold) python3 -m warmstart --db $DB run --cold --json --name $APP -- $S/${PROG:-readall} $M/${TREE:-tree} > $S/r.json ;;
      data) sync; echo 3 > /proc/sys/vm/drop_caches; python3 -m warmstart --db $DB run $RUNOPT --no-fs-metadata --json --name $APP -- $S/${PROG:-readall} $M/${TREE:-tree} > $S/r.json ;;
      meta) sync; echo 3 > /proc/sys/vm/drop_caches; python3 -m warmstart --db $DB run $RUNOPT --json --name $APP -- $S/${PROG:-readall} $M/${TREE:-tree} > $S/r.json ;;
    esac
    python3 -c "
import json; d=json.load(open('$S/r.json')); st=d.get('replay_stats') or {}
print('$FS', '$v', round(d['launch_time_s'],3), 'pre', round(d.get('prebuffer_s') or 0,3), 'app', round(d['app_time_s'],3),
      'meta_ms', round((st.get('t_meta_ns') or 0)/1e6,1), 'dirs', st.get('meta_dirs'), 'files', st.get('meta_files'), 'devr', st.get('device_ranges'), d['output'].strip())"
  done
done
