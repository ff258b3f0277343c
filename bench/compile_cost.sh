#!/usr/bin/env bash
# Compile cost of qforge's headers, the figure a header-only library's user pays per
# translation unit (issue 14 item 6). CPU seconds (user + sys) of one compile each:
#   std       the standard / system headers that qforge's headers include, alone
#   umbrella  an empty main() that includes qforge/qforge.hpp
#   umb-sep   the same with QFORGE_SEPARATE_COMPILATION (the entry points' runs declared only)
#   conv      bench/compile_cost/custom_converter.cpp (a 33-line converter)
#   conv-std  the standard headers that converter's includes pull in, alone
#   conv-sep  the converter with QFORGE_SEPARATE_COMPILATION (its qforge code compiled elsewhere)
#   sep-std   the standard headers the converter's includes pull in in that mode, alone
#   impl      the one TU that defines QFORGE_IMPLEMENTATION (paid once per program)
# and the ratios the issue aims at (umbrella <= 2x std, converter <= 3x its std headers).
# With QFORGE_COST_FOLDER=<tests folder> (e.g. io) it also compiles that test folder file by file
# and as the one translation unit the suite builds (tests/CMakeLists.txt: QFORGE_UNITY_TESTS).
#
#   bench/compile_cost.sh [CXX] [FLAGS...]     e.g. bench/compile_cost.sh clang++ -O2
# Defaults: g++ -O2. Run it at low priority on a quiet machine: each figure is one compile, and
# the load average before and after is printed (CPU seconds grow on a loaded machine too).
set -euo pipefail
cd "$(dirname "$0")/.."
CXX="${1:-g++}"
shift || true
FLAGS=("$@")
((${#FLAGS[@]})) || FLAGS=(-O2)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The system headers a TU's qforge headers include directly, in the order they are first
# included (from the compiler's -H include tree, so #if-guarded ones are only counted when used).
std_headers_of() {  # SOURCE [EXTRA FLAGS...]
    local src="$1"
    shift
    "$CXX" -std=c++20 "${FLAGS[@]}" "$@" -Iinclude -H -fsyntax-only "$src" 2>&1 >/dev/null | python3 -c '
import re, sys
stack, seen = [], []
for line in sys.stdin:
    m = re.match(r"^(\.+) (\S+)$", line.rstrip("\n"))
    if not m:
        continue
    depth, path = len(m.group(1)), m.group(2)
    del stack[depth - 1:]
    stack.append(path)
    parent = stack[-2] if depth > 1 else None
    own = "include/qforge/" in path
    if not own and (parent is None or "include/qforge" in parent) and path not in seen:
        seen.append(path)
for p in seen:
    print("#include \"%s\"" % p)
'
}

cpu() {  # LABEL SOURCE [EXTRA FLAGS...]: prints CPU seconds of one compile
    local label="$1" src="$2"
    shift 2
    /usr/bin/time -f "%U %S" -o "$tmp/time" "$CXX" -std=c++20 "${FLAGS[@]}" -Iinclude "$@" \
        -c "$src" -o "$tmp/out.o"
    awk -v l="$label" '{ printf "%-10s %7.2f s\n", l, $1 + $2 }' "$tmp/time" | tee -a "$tmp/table"
}
secs() { awk -v l="$1" '$1 == l { print $2 }' "$tmp/table"; }

printf '#include "qforge/qforge.hpp"\nint main() {}\n' >"$tmp/umbrella.cpp"
{ std_headers_of "$tmp/umbrella.cpp"; printf 'int main() {}\n'; } >"$tmp/std.cpp"
conv=bench/compile_cost/custom_converter.cpp
{ std_headers_of "$conv"; printf 'int main() {}\n'; } >"$tmp/conv_std.cpp"
{ std_headers_of "$conv" -DQFORGE_SEPARATE_COMPILATION; printf 'int main() {}\n'; } >"$tmp/sep_std.cpp"
printf '#define QFORGE_IMPLEMENTATION\n#include "qforge/qforge.hpp"\n' >"$tmp/impl.cpp"

echo "$CXX ${FLAGS[*]} (CPU seconds, one compile each; $(nproc) CPUs, load before:$(cut -d' ' -f1-3 /proc/loadavg))"
cpu std "$tmp/std.cpp"
cpu umbrella "$tmp/umbrella.cpp"
cpu conv-std "$tmp/conv_std.cpp"
cpu conv "$conv"
if grep -rq QFORGE_SEPARATE_COMPILATION include/qforge/core/config.hpp 2>/dev/null; then
    cpu umb-sep "$tmp/umbrella.cpp" -DQFORGE_SEPARATE_COMPILATION
    cpu conv-sep "$conv" -DQFORGE_SEPARATE_COMPILATION
    cpu sep-std "$tmp/sep_std.cpp"
    cpu impl "$tmp/impl.cpp" -DQFORGE_SEPARATE_COMPILATION
fi
awk -v u="$(secs umbrella)" -v s="$(secs std)" -v c="$(secs conv)" -v cs="$(secs conv-std)" 'BEGIN {
    printf "umbrella / std      %5.2fx  (aim <= 2)\n", u / s
    printf "converter / its std %5.2fx  (aim <= 3)\n", c / cs }'
if [[ -n "$(secs conv-sep)" ]]; then
    awk -v c="$(secs conv-sep)" -v cs="$(secs conv-std)" 'BEGIN {
        printf "separate converter / its std %5.2fx\n", c / cs }'
    awk -v c="$(secs conv-sep)" -v cs="$(secs sep-std)" 'BEGIN {
        printf "separate converter / the std headers it includes in that mode %5.2fx\n", c / cs }'
    awk -v u="$(secs umb-sep)" -v s="$(secs std)" 'BEGIN { printf "separate umbrella / std      %5.2fx\n", u / s }'
fi
if [[ -n "${QFORGE_COST_FOLDER:-}" ]]; then
    folder="tests/$QFORGE_COST_FOLDER"
    sep=(-DQFORGE_SEPARATE_COMPILATION)  # as the suite builds every folder (tests/CMakeLists.txt)
    own=(-Itests -DQFORGE_SOURCE_DIR=\"$PWD\" -DQFORGE_BINARY_DIR=\"$tmp\" "${sep[@]}")
    : >"$tmp/unity.cpp"
    for src in "$folder"/*.cpp; do
        printf '#include "%s"\n' "$PWD/$src" >>"$tmp/unity.cpp"
        cpu "file" "$src" "${own[@]}" >/dev/null
    done
    cpu unity "$tmp/unity.cpp" "${own[@]}" >/dev/null
    awk -v f="$folder" '$1 == "file" { t += $2; n++ } $1 == "unity" { u = $2 }
        END { printf "%s: %d files one by one %.2f s, as one TU %.2f s (%.2fx)\n", f, n, t, u, t / u }' "$tmp/table"
fi
echo "load after:$(cut -d' ' -f1-3 /proc/loadavg)"
