#!/usr/bin/env bash
# Build the accelerator for aarch64 with a cross compiler and run its equality tests under
# qemu-user, on an aarch64 CPython of Debian's (no aarch64 machine needed).
#
#   tools/aarch64_check.sh [work-dir]        (default: build/aarch64)
#   AARCH64_TESTS="tests/test_scan_numbers.py" tools/aarch64_check.sh   (other tests)
#
# Needs Debian's debootstrap, qemu-user and gcc-aarch64-linux-gnu (installed when missing and
# run as root) and network access to Debian's archive and PyPI. Steps: debootstrap downloads
# and unpacks an arm64 Debian with python3 (no chroot, no binfmt: qemu-aarch64 runs the
# interpreter from that tree), pip (under qemu) installs the package's dependencies' aarch64
# wheels beside it, the extensions are compiled by aarch64-linux-gnu-gcc from setup.py's own
# sources and flags, and pytest runs the tests that compare the accelerator with the pure path.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
WORK=$(mkdir -p "${1:-build/aarch64}" && cd "${1:-build/aarch64}" && pwd)
ROOT=$WORK/root   # the arm64 Debian tree
SITE=$WORK/site   # the aarch64 wheels
SRC=$WORK/src     # this checkout's package and tests, with the aarch64 extensions
# the accelerator's equality tests against the pure path (about 35 minutes on 2 emulated cores)
TESTS=${AARCH64_TESTS:-"tests/test_scan_numbers.py tests/test_other_walker.py tests/test_bulk.py
       tests/test_parse_jsonl.py tests/test_parse_parquet.py tests/test_fastpath.py"}

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
if ((${#need[@]})); then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "aarch64_check: install ${need[*]} first" >&2
        exit 2
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ ! -x "$ROOT/usr/bin/python3" ]; then
    # --foreign only downloads and unpacks (no package scripts run: nothing to execute yet);
    # the included packages are downloaded, and unpacked here with dpkg -x.
    debootstrap --foreign --arch=arm64 --variant=minbase --include=python3,python3-dev,python3-pip \
        bookworm "$ROOT" http://deb.debian.org/debian >"$WORK/debootstrap.log"
    for deb in "$ROOT"/var/cache/apt/archives/*.deb; do dpkg -x "$deb" "$ROOT"; done
fi
# The interpreter as a host script: qemu-aarch64 runs Debian's python3 with this script's path
# as its argv[0], so sys.executable is the script and the subprocesses the tests start (the CLI,
# pytest-xdist's workers) run under qemu as well.
mkdir -p "$WORK/bin"
cat >"$WORK/bin/python3" <<SH
#!/bin/sh
exec env QEMU_LD_PREFIX="$ROOT" PYTHONPATH="$SITE\${PYTHONPATH:+:\$PYTHONPATH}" qemu-aarch64 -0 "\$0" "$ROOT/usr/bin/python3" "\$@"
SH
chmod +x "$WORK/bin/python3"
arm() { "$WORK/bin/python3" "$@"; }
echo "aarch64_check: $(arm -c 'import platform, sys; print(platform.machine(), sys.version.split()[0])')"

if [ ! -e "$SITE/.done" ]; then
    # the base dependencies (pyproject.toml) and the test runner
    deps=$(python3 -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
    # shellcheck disable=SC2086
    arm -m pip install -q --disable-pip-version-check --target "$SITE" $deps pytest pytest-xdist hypothesis
    touch "$SITE/.done"
fi

rm -rf "$SRC" && mkdir -p "$SRC"
git archive HEAD logforensics tests fixtures grammars rules reports bench tools pyproject.toml README.md | tar -x -C "$SRC"
SUFFIX=$(arm -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
INC=$(arm -c 'import sysconfig; print(sysconfig.get_path("include"))')
# setup.py's extensions (module, sources, flags), read by running it with setup() replaced
python3 - "$REPO/setup.py" <<'PY' >"$WORK/extensions.txt"
import runpy, sys, setuptools
def capture(**kw):
    for ext in kw["ext_modules"]:
        print(ext.name, ",".join(ext.sources), " ".join(ext.extra_compile_args))
setuptools.setup = capture
runpy.run_path(sys.argv[1], run_name="__main__")
PY
while read -r name sources flags; do
    out=$SRC/${name//.//}$SUFFIX
    # shellcheck disable=SC2086
    aarch64-linux-gnu-gcc -shared -fPIC -Wall $flags -I"$ROOT$INC" -I"$ROOT/usr/include" \
        -o "$out" $(for s in ${sources//,/ }; do echo "$SRC/$s"; done) -lm
    echo "aarch64_check: built $(basename "$out")"
done <"$WORK/extensions.txt"

cd "$SRC"
arm -c 'from logforensics.read import bulk, emit, other; import sys; sys.exit(not (bulk.available() and emit.available() and other.available()))' \
    || { echo "aarch64_check: the aarch64 extensions did not load" >&2; exit 1; }
# shellcheck disable=SC2086
arm -m pytest -q -p no:cacheprovider -n "$(nproc)" $TESTS
