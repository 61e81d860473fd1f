#!/bin/sh
# Where the command finds its mode plugins (TAP): the build tree's ssmstate
# finds its own build's plugins (the .libs beside it) with
# $SSMSTATE_PLUGIN_PATH unset, for `plugins` and for `run`; a plugin_dir that
# is missing or is a file is an error naming it (config, `plugins
# --plugin-dir`); `plugins` exits 2 when a file it lists is not usable, and
# when it finds none, naming every directory it searched.
set -u
ssmstate="$SSM_TOP_BUILDDIR/ssmstate"
config="$SSM_TOP_SRCDIR/examples/quickstart.ini"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
report() { # status, name
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then
        echo "ok $n - $2"
    else
        echo "not ok $n - $2"
        fails=$((fails + 1))
        sed 's/^/# /' "$tmp/out" "$tmp/err" 2>/dev/null | tail -n 20
    fi
}
one_error() { # rc, expected text
    [ "$1" -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF -- "$2" "$tmp/err"
}

echo "1..9"
env -u SSMSTATE_PLUGIN_PATH "$ssmstate" plugins >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] && grep -q "^native .* ok .*/\.libs/native\.so$" "$tmp/out"
report $? "the build's ssmstate lists its own plugins without \$SSMSTATE_PLUGIN_PATH"

env -u SSMSTATE_PLUGIN_PATH "$ssmstate" run "$config" --quiet >"$tmp/out" 2>"$tmp/err" &&
    grep -q "verdict     PASS" "$tmp/out"
report $? "the build's ssmstate runs a config without \$SSMSTATE_PLUGIN_PATH"

sed 's|^;plugin_dir = .*|plugin_dir = no/such/dir|' "$config" >"$tmp/missing.ini"
"$ssmstate" run "$tmp/missing.ini" --quiet >"$tmp/out" 2>"$tmp/err"
one_error $? "missing.ini: [state] plugin_dir $tmp/no/such/dir: no such directory"
report $? "a missing plugin_dir is an error naming it"

sed "s|^;plugin_dir = .*|plugin_dir = $config|" "$config" >"$tmp/file.ini"
"$ssmstate" check "$tmp/file.ini" >"$tmp/out" 2>"$tmp/err"
one_error $? "plugin_dir $config: not a directory"
report $? "a plugin_dir that is a file is an error naming it"

"$ssmstate" plugins --plugin-dir "$tmp/none" >"$tmp/out" 2>"$tmp/err"
one_error $? "plugin_dir $tmp/none: no such directory"
report $? "plugins --plugin-dir with no such directory"

mkdir "$tmp/empty"
"$ssmstate" plugins --plugin-dir "$tmp/empty" >"$tmp/out" 2>"$tmp/err" &&
    grep -q "^native " "$tmp/out"
report $? "an empty --plugin-dir adds nothing, the rest of the path still serves"

SSMSTATE_PLUGIN_PATH="$SSM_TEST_PLUGIN_DIR" "$ssmstate" plugins >"$tmp/out" 2>"$tmp/err"
one_error $? "files found are not usable (listed above)" && grep -q "wrong_abi .* error" "$tmp/out"
report $? "plugins exits 2 when a file it lists is not usable"

# The program itself away from its build (no .libs beside it), with nothing
# on the path: nothing is found, and every directory searched is named.
real="$SSM_TOP_BUILDDIR/.libs/ssmstate"
[ -x "$real" ] || real="$SSM_TOP_BUILDDIR/.libs/lt-ssmstate"
if [ -x "$real" ]; then
    mkdir "$tmp/bin"
    cp "$real" "$tmp/bin/ssmstate"
    LD_LIBRARY_PATH="$SSM_TOP_BUILDDIR/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        SSMSTATE_PLUGIN_PATH="$tmp/empty" "$tmp/bin/ssmstate" plugins --plugin-dir "$tmp/empty" \
        >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -eq 0 ] && ! grep -q "$tmp" "$tmp/out"; then
        echo "ok $((n + 1)) # SKIP plugins are installed on this machine"
        n=$((n + 1))
    else
        one_error "$rc" "no plugins found; searched $tmp/empty (--plugin-dir), " &&
            grep -qF "(the installed plugin directory), $tmp/empty (\$SSMSTATE_PLUGIN_PATH)" \
                "$tmp/err"
        report $? "no plugins found: exit 2, every directory searched named"
    fi
    LD_LIBRARY_PATH="$SSM_TOP_BUILDDIR/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        env -u SSMSTATE_PLUGIN_PATH "$tmp/bin/ssmstate" run "$config" --quiet \
        >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq 2 ] && grep -qF "no plugin for mode 'native': tried " "$tmp/err" ||
        grep -q "verdict     PASS" "$tmp/out" # (installed plugins)
    report $? "away from its build, a run names the paths it tried"
else
    echo "ok 8 # SKIP no uninstalled program in .libs (a static build)"
    echo "ok 9 # SKIP no uninstalled program in .libs (a static build)"
fi
[ "$fails" -eq 0 ]
