#!/bin/bash
# alternate.sh DIR OUT ROUNDS cmd...: the versions in DIR/old and DIR/new run alternately (old, new, ...)
# ROUNDS times, each process by process with its bench output in OUT/{old,new}_N. A version is files
# copied over the tree before its run: *.cpp into runtime/csrc (then built into DIR/build_VERSION, its
# own TRIFORCE_NATIVE_DIR), *.py into runtime/. The new version's files stay in the tree at the end.
# Round 17: DIR/old|new held layer_cpu.cpp of 95f8292 | b45826a (passes_glue/, e2e_glue/), then
# runtime/{gamma,speculate,engine,cache_streaming}.py of b45826a | 13824bc+b20d315 (e2e_gamma_prefill/, e2e_32k/).
dir=$1; out=$2; rounds=$3; shift 3
cd /work/main && source .venv/bin/activate
mkdir -p "$out"
install_version() {
  compgen -G "$dir/$1/*.py" > /dev/null && cp "$dir/$1"/*.py runtime/
  if compgen -G "$dir/$1/*.cpp" > /dev/null; then
    cp "$dir/$1"/*.cpp runtime/csrc/
    export TRIFORCE_NATIVE_DIR=$dir/build_$1
    python -m triforce.runtime.native build > /dev/null 2>&1
  fi
}
for round in $(seq 1 "$rounds"); do
  for version in old new; do
    install_version $version
    chrt -f 10 "$@" --out "$out/${version}_$round" > "$out/${version}_$round.log" 2>&1
  done
done
install_version new
