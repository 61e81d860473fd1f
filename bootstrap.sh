#!/usr/bin/env bash
# Installs what ssmstate needs (Debian packages), builds it, and then either
#   ./bootstrap.sh run     runs the main job: ssmstate run examples/quickstart.ini, on
#                          the GPU when the build has CUDA and one is visible
#   ./bootstrap.sh check   runs the whole test suite (make check)
#   ./bootstrap.sh build   only builds
# Extra arguments after the verb go to ./configure (e.g. --without-cuda).
set -euo pipefail
cd "$(dirname "$0")"
verb=${1:-build}
shift || true

# python3-matplotlib only draws serve's figures (bench/plot_serve.py) and runs
# their test; nothing builds with it, and without it that test reports SKIP.
packages=(build-essential autoconf automake libtool pkg-config libinih-dev check
          python3 python3-numpy python3-pytest python3-matplotlib)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "bootstrap: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ -x configure ] && [ configure -nt configure.ac ] && [ configure -nt Makefile.am ] || autoreconf -fi
[ -f Makefile ] && [ config.status -nt configure ] || ./configure "$@"
make -j"$(nproc)"

case "$verb" in
run)
    # The plugins of this build tree, not an installed copy.
    SSMSTATE_PLUGIN_PATH="$PWD/.libs" ./ssmstate run examples/quickstart.ini --device auto ;;
check)
    make -j"$(nproc)" check || { cat test-suite.log 2>/dev/null | tail -n 200; exit 1; } ;;
build) ;;
*)
    echo "usage: $0 [build|run|check] [configure options]" >&2; exit 2 ;;
esac
