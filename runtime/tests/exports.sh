#!/bin/sh
# exports.sh LIBRARY SYMBOL - fails unless LIBRARY's dynamic symbol table
# defines SYMBOL and nothing else. The CUDA backend's libraries are loaded into
# processes that also load cuDNN and cuBLAS: a copy of libstdc++ (or of the
# CUDA runtime) exported from them would be bound by those libraries in place
# of the system's, and crash them (seen with a toolchain that links libstdc++
# statically).
set -u
lib=$1 want=$2
command -v nm >/dev/null || { echo "exports: no nm (binutils) to read $lib"; exit 1; }
syms=$(nm -D --defined-only "$lib" | awk '{ print $3 }' | sed 's/@.*//' | sort -u)
extra=$(printf '%s\n' "$syms" | grep -v -x -F "$want" | grep -v '^$')
if ! printf '%s\n' "$syms" | grep -q -x -F "$want"; then
    echo "exports: $lib does not define $want"
    exit 1
fi
if [ -n "$extra" ]; then
    echo "exports: $lib exports $(printf '%s\n' "$extra" | wc -l) symbols beside $want, such as:"
    printf '%s\n' "$extra" | head -n 10
    exit 1
fi
echo "exports: $lib defines $want alone"
