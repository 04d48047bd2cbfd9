# Sourced by the tests of this directory: checks that node and npm exist (their absence is a
# failure: scripts/install-deps.sh installs them) and installs the test's npm packages with
# `npm ci`, once per lock file, into $node_dir under the build tree; copies the scripts there.
# Needs: $here (this directory), $work (the test's build directory), fail().
command -v node >/dev/null || fail "node not found (scripts/install-deps.sh installs nodejs)"
command -v npm >/dev/null || fail "npm not found (scripts/install-deps.sh installs npm)"
node_dir=$work/node
if ! cmp -s "$here/package-lock.json" "$node_dir/package-lock.json" 2>/dev/null ||
   [[ ! -d $node_dir/node_modules ]]; then
  rm -rf "$node_dir" && mkdir -p "$node_dir"
  cp "$here/package.json" "$here/package-lock.json" "$node_dir/"
  (cd "$node_dir" && npm ci --no-audit --no-fund --ignore-scripts >/dev/null) ||
    fail "npm ci of $here/package-lock.json failed"
fi
cp "$here"/*.mjs "$node_dir/"
