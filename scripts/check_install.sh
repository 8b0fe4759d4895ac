#!/usr/bin/env bash
# An installed exapt works for an application: `cmake --install BUILD` into a fresh prefix,
# then the embedding example (examples/search_in_memory.c) built against it with CMake
# (find_package) from a C project and from a C++ one, each linked with the shared and with
# the static library, and with pkg-config (shared, and --static), each program run; and the
# installed libexapt.so exports only the API and the installed command loads its backend
# modules. Usage: check_install.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
lib=$(dirname "$(find "$prefix" -name libexapt.so | head -1)")
scripts/check_exports.sh "$lib/libexapt.so" "$prefix/include"
[ -f "$prefix/share/man/man1/exapt-search.1" ] || { echo "no man page installed"; exit 1; }
# the installed command finds its library and the backend modules beside it
"$prefix/bin/exapt" info >"$work/info.txt" 2>&1 || { cat "$work/info.txt"; exit 1; }
if grep -q "not loaded" "$work/info.txt"; then
    grep "not loaded" "$work/info.txt"; echo "an installed backend module did not load"; exit 1
fi
echo "installed exapt info: $(grep -c '^[a-z-]*: ' "$work/info.txt") backends described, every module loaded"

run() { # NAME PROGRAM: runs it; the example prints the genotype it found
    local out
    out=$(OMP_NUM_THREADS=1 "$2") || { echo "$1: the program failed"; exit 1; }
    grep -q "Genotype(normal=" <<<"$out" || { echo "$1: no genotype printed"; exit 1; }
    echo "$1: built, linked and ran"
}
for cxx in OFF ON; do
    for static in OFF ON; do
        b=$work/cmake-cxx$cxx-static$static
        cmake -S tests/install -B "$b" -DCMAKE_PREFIX_PATH="$prefix" -DCXX=$cxx \
            -DSTATIC=$static -DCMAKE_BUILD_TYPE=Release >"$b.log" 2>&1 &&
            cmake --build "$b" -j"$(nproc)" >>"$b.log" 2>&1 ||
            { tail -20 "$b.log"; echo "CMake, C++ $cxx, static $static: build failed"; exit 1; }
        run "CMake, C++ $cxx, static $static" "$b/search_in_memory"
    done
done

export PKG_CONFIG_PATH=$lib/pkgconfig
src=examples/search_in_memory.c
cc -o "$work/pc-shared" "$src" $(pkg-config --cflags --libs exapt) -Wl,-rpath,"$lib"
run "pkg-config, C, shared" "$work/pc-shared"
# --static: the private libraries too, and libexapt.a itself instead of the .so
libs=$(pkg-config --static --libs exapt | sed 's/-lexapt\b/-l:libexapt.a/')
cc -o "$work/pc-static" "$src" $(pkg-config --cflags exapt) $libs
run "pkg-config, C, static" "$work/pc-static"
cc -c -o "$work/example.o" "$src" $(pkg-config --cflags exapt)
c++ -o "$work/pc-cxx" "$work/example.o" tests/install/headers.cpp $(pkg-config --cflags exapt) \
    $(pkg-config --libs exapt) -Wl,-rpath,"$lib"
run "pkg-config, C++, shared" "$work/pc-cxx"
