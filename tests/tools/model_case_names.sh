#!/usr/bin/env bash
# model_case_names.sh -- every model case name cited in the tree exists in `model/check.sh --list`,
# the one list of the model's cases.
#
# Usage: model_case_names.sh ROOT          check ROOT's docs/, src/, model/, tests/ and README.md
#        model_case_names.sh --self-test   show that a citation of a missing case fails the check
#
# A citation is a kebab-case name in one of these forms (line breaks and comment markers
# between the words are ignored):
#   case `NAME`, cases `NAME`, `NAME` case        backticked, anywhere
#   the model's NAME case, ipcring.pml, case NAME  the model named in the sentence
#   check.sh [--option...] NAME                    a command line
#   | `NAME` |                                     a row of docs/model.md's result tables
# Exit status: 0 every cited name exists (and at least one was found: a scan that finds none has
# gone blind); 1 otherwise.
set -u

self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

# The citations in the files given, one "file<TAB>name" per line.
citations() {
  perl -e '
    my $n = qr/[a-z0-9]+(?:-[a-z0-9]+)+/;
    for my $file (@ARGV) {
      open(my $fh, "<", $file) or next;
      local $/; my $text = <$fh>; close $fh;
      my @found;
      if ($file =~ m{(^|/)model\.md$}) { push @found, $text =~ /^\|\s*`($n)`/mg; }
      $text =~ s/\n[ \t]*(?:\/\/+|#+|\*+(?!\/))?[ \t]*/ /g;  # one line, comment markers gone
      push @found, $text =~ /\bcases?\s+`($n)`/g;
      push @found, $text =~ /`($n)`\s+case\b/g;
      push @found, $text =~ /\bmodel(?:\x27s|\x{2019}s)\s+($n)\s+case\b/g;
      push @found, $text =~ /\b(?:ipcring|lease)\.pml`?,?\s+cases?\s+($n)\b/g;
      push @found, $text =~ /\bcheck\.sh(?:\s+--\S+)*(?:\s+\d+)?\s+($n)\b/g;
      print "$file\t$_\n" for @found;
    }' "$@"
}

# Checks the files under ROOT against ROOT/model/check.sh --list.
check() {
  local root=$1
  local names
  names=$(bash "$root/model/check.sh" --list | awk '{print $1}') || return 1
  [ -n "$names" ] || { echo "model_case_names: model/check.sh --list printed no cases" >&2; return 1; }
  local files=()
  while IFS= read -r -d '' f; do [ "$f" -ef "$self" ] || files+=("$f"); done < <(
    find "$root/docs" "$root/src" "$root/model" "$root/tests" "$root/README.md" \
      -type f \( -name '*.md' -o -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.pml' \
      -o -name '*.sh' -o -name '*.py' -o -name '*.cu' -o -name '*.txt' \) -print0 2>/dev/null)
  local cited missing=0 count=0
  cited=$(citations "${files[@]}")
  while IFS=$'\t' read -r file name; do
    [ -n "$name" ] || continue
    count=$((count + 1))
    if ! grep -qx -- "$name" <<<"$names"; then
      echo "model_case_names: ${file#"$root"/} cites model case '$name', which model/check.sh --list does not have" >&2
      missing=$((missing + 1))
    fi
  done <<<"$cited"
  if [ $count -eq 0 ]; then
    echo "model_case_names: no model case citation found under $root (the scan is blind)" >&2
    return 1
  fi
  echo "model_case_names: $count citations, $missing of a case that does not exist"
  [ $missing -eq 0 ]
}

self_test() {
  local dir
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' RETURN
  mkdir -p "$dir/model" "$dir/docs" "$dir/src" "$dir/tests"
  printf '#!/usr/bin/env bash\necho "takeover  expect pass"\necho "broken-one  expect x"\n' \
    >"$dir/model/check.sh"
  printf 'Found by the model (case\n`takeover`), see model/check.sh --keep broken-one.\n' \
    >"$dir/docs/good.md"
  printf '// (the model'"'"'s takeover case)\n' >"$dir/src/good.cpp"
  check "$dir" >/dev/null || { echo "self-test: valid citations were refused" >&2; return 1; }
  printf '// found by the\n// `no-such-case` case of the model\n' >"$dir/src/bad.cpp"
  local out
  if out=$(check "$dir" 2>&1); then
    echo "self-test: a citation of a missing case passed" >&2
    return 1
  fi
  grep -q "no-such-case" <<<"$out" || { echo "self-test: the missing name was not named" >&2; return 1; }
  echo "self-test: a missing case name fails the check and is named"
}

case "${1:-}" in
  --self-test) self_test ;;
  "" | -*) echo "usage: $0 ROOT | --self-test" >&2; exit 2 ;;
  *) check "$1" ;;
esac
