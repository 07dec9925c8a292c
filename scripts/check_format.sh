#!/usr/bin/env bash
# Fails (exit 1, naming each file and line) where the house formatters would change the tree:
# clang-format (the tree's .clang-format) on every C++ source and header, black -l 120 on every
# Python file. docs/contributing.md says how to format a change before committing it.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in clang-format black; do
  command -v "$tool" >/dev/null || { echo "check_format.sh: $tool is not installed (Debian: apt-get install $tool)" >&2; exit 1; }
done
# The tracked files (a checkout), or the same globs under the tree (an unpacked archive).
if git rev-parse --git-dir >/dev/null 2>&1; then
  mapfile -t cxx < <(git ls-files 'src/*.cpp' 'src/*.hpp' 'include/*.hpp' 'tests/*.cpp' 'tests/*.hpp' 'tests/*.h' 'bench/*.cpp' |
    grep -v '^tests/gpu/compat/')
  mapfile -t py < <(git ls-files '*.py')
else
  mapfile -t cxx < <(find src include tests bench \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) -not -path 'tests/gpu/compat/*' | sort)
  mapfile -t py < <(find . -name '*.py' -not -path './build*' -not -path './.git/*' | sort)
fi
# Examples and test data are sources that patches and digests are made against: never reformatted.
status=0
clang-format --dry-run -Werror "${cxx[@]}" || status=1
black -q -l 120 --check "${py[@]}" || { black -l 120 --check "${py[@]}" 2>&1 | grep '^would reformat' >&2; status=1; }
if [[ $status != 0 ]]; then
  echo "check_format.sh: files above are not formatted: clang-format -i FILE; black -l 120 FILE (docs/contributing.md)" >&2
fi
exit $status
