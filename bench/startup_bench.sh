#!/bin/sh
# startup_bench.sh - the start-up time of `tide -e ''` (LuaJIT, libtide and the
# Tide module loaded, then exit) next to `luajit -e ''` measured in the same run:
# the mean of N runs (default 40), best of 3 batches. Target: under 50 ms.
# usage: bench/startup_bench.sh [path/to/tide]
set -e
TIDE=${1:-build/tide}
N=${N:-40}
[ -x "$TIDE" ] || { echo "startup_bench: no executable at $TIDE (run make build)" >&2; exit 1; }

# Mean microseconds per run of "$@" over N runs.
batch() {
    start=$(date +%s%N)
    i=0
    while [ $i -lt "$N" ]; do
        "$@" >/dev/null 2>&1 || { echo "startup_bench: '$*' failed" >&2; exit 1; }
        i=$((i + 1))
    done
    end=$(date +%s%N)
    echo $(((end - start) / N / 1000))
}

best() {
    b=""
    for _ in 1 2 3; do
        t=$(batch "$@")
        if [ -z "$b" ] || [ "$t" -lt "$b" ]; then b=$t; fi
    done
    echo "$b"
}

ms() { printf '%d.%02d ms' $(($1 / 1000)) $((($1 % 1000) / 10)); }

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "startup ($N runs, best of 3 batches) on $(nproc) x ${cpu:-unknown CPU}"
t_tide=$(best "$TIDE" -e '')
t_lj=$(best luajit -e '')
t_use=$(best "$TIDE" -e 'tide.ones(2):add(1):sum():item()')
echo "  tide -e ''                 $(ms "$t_tide")   (target < 50 ms)"
echo "  luajit -e ''               $(ms "$t_lj")   (reference: LuaJIT alone)"
echo "  tide -e '<one small op>'   $(ms "$t_use")"
