#!/usr/bin/env bash
# Sets up an emulated arm64 device for tests/arm (issue 13): qemu user mode, an arm64 CPython 3.11
# userland and the device runtime's aarch64 wheels, all from the package registries, all under one cache
# directory outside the repository (${CUVIL_ARM_ROOT:-$HOME/.cache/cuvil-edge/arm64}).
#
#   bash .ci/arm_emulated.sh          # idempotent: a finished setup is reused (a stamp file says so)
#   bash .ci/arm_emulated.sh --force  # start again from scratch
#
# Nothing is installed into the system: Debian packages are resolved with a private apt state (its own
# package lists and an empty dpkg status, architectures amd64 + arm64) and unpacked with `dpkg -x`, so the
# host's dpkg architectures and package lists are left as they were. Layout of the cache directory:
#   qemu/usr/bin/qemu-aarch64-static   the emulator (Debian's qemu-user-static, a static binary)
#   sysroot/                           arm64 python3.11 + the libraries it loads (qemu -L sysroot)
#   site/                              aarch64 wheels (wasmtime, numpy, cryptography, cffi), for PYTHONPATH
#   env.sh                             QEMU, SYSROOT, ARM_PYTHON, ARM_SITE for tests/arm
#   ready                              stamp: what was installed; present only after a complete setup
set -euo pipefail
ROOT=${CUVIL_ARM_ROOT:-${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}/.cache/cuvil-edge/arm64}
# Pinned like pyproject.toml's wasmtime; the others at the versions the x86 side was checked with.
WHEELS=(wasmtime==50.0.1 numpy==2.4.6 cryptography==48.0.0 cffi==2.0.0)
DEBS_ARM=(python3.11-minimal:arm64 libpython3.11-stdlib:arm64 libstdc++6:arm64 libgcc-s1:arm64)
DEBS_HOST=(qemu-user-static:amd64)
STAMP_TEXT="v1 ${WHEELS[*]} ${DEBS_ARM[*]} ${DEBS_HOST[*]}"

mkdir -p "$(dirname "$ROOT")"
exec 9>"$ROOT.lock" && flock 9  # two setups at once would unpack over each other
if [[ "${1:-}" != --force && -f "$ROOT/ready" && "$(cat "$ROOT/ready")" == "$STAMP_TEXT" \
      && -x "$ROOT/qemu/usr/bin/qemu-aarch64-static" && -x "$ROOT/sysroot/usr/bin/python3.11" \
      && -d "$ROOT/site/wasmtime" && -f "$ROOT/env.sh" ]]; then
    echo "arm64 emulation ready in $ROOT (cached)"
    exit 0
fi
[[ "$(uname -m)" == x86_64 ]] || { echo "arm_emulated.sh: needs an x86_64 host" >&2; exit 1; }
command -v apt-get >/dev/null && command -v dpkg >/dev/null || { echo "arm_emulated.sh: needs apt/dpkg" >&2; exit 1; }
start=$SECONDS
rm -rf "$ROOT/ready" "$ROOT/sysroot" "$ROOT/qemu" "$ROOT/site" "$ROOT/env.sh"
APT="$ROOT/apt"
mkdir -p "$APT/state/lists/partial" "$APT/cache/archives/partial" "$APT/etc"
: > "$APT/state/status"
cat > "$APT/etc/apt.conf" <<CONF
Dir::State "$APT/state";
Dir::State::status "$APT/state/status";
Dir::Cache "$APT/cache";
APT::Architectures { "amd64"; "arm64"; };
APT::Install-Recommends "false";
Acquire::Languages "none";
APT::Sandbox::User "root";
Acquire::Retries "3";
CONF
export APT_CONFIG="$APT/etc/apt.conf"
echo "== apt: package lists (amd64 + arm64, private state)"
apt-get update -qq
echo "== apt: download ${DEBS_ARM[*]} ${DEBS_HOST[*]} and their dependencies"
apt-get install -y -qq --download-only "${DEBS_HOST[@]}" "${DEBS_ARM[@]}" >/dev/null
mkdir -p "$ROOT/sysroot" "$ROOT/qemu"
for deb in "$APT"/cache/archives/*.deb; do
    case "$(basename "$deb")" in
        *_amd64.deb) [[ "$(basename "$deb")" == qemu-user-static_* ]] && dpkg -x "$deb" "$ROOT/qemu" && find "$ROOT/qemu" -type f ! -name qemu-aarch64-static -delete ;;
        *_arm64.deb|*_all.deb) dpkg -x "$deb" "$ROOT/sysroot" ;;
    esac
done
QEMU="$ROOT/qemu/usr/bin/qemu-aarch64-static"
PY="$ROOT/sysroot/usr/bin/python3.11"
[[ -x "$QEMU" && -x "$PY" ]] || { echo "arm_emulated.sh: qemu or python3.11 missing after unpacking" >&2; exit 1; }
echo "== pip: aarch64 wheels ${WHEELS[*]}"
python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-compile --target "$ROOT/site" \
    --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
    --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 --platform manylinux_2_34_aarch64 \
    "${WHEELS[@]}"
cat > "$ROOT/env.sh" <<ENV
QEMU=$QEMU
SYSROOT=$ROOT/sysroot
ARM_PYTHON=$PY
ARM_SITE=$ROOT/site
ENV
echo "== check: the emulated interpreter imports the runtime's dependencies"
PYTHONPATH="$ROOT/site" PYTHONNOUSERSITE=1 "$QEMU" -L "$ROOT/sysroot" "$PY" -c '
import platform, ctypes, hashlib, multiprocessing.shared_memory, numpy, wasmtime, cryptography
from importlib.metadata import version
assert platform.machine() == "aarch64", platform.machine()
wasmtime.Engine()
print(platform.machine(), "python", platform.python_version(), "numpy", numpy.__version__,
      "wasmtime", version("wasmtime"), "cryptography", cryptography.__version__)'
rm -rf "$APT/cache/archives"/*.deb  # unpacked already; the lists stay for a --force rerun
echo "$STAMP_TEXT" > "$ROOT/ready"
echo "arm64 emulation ready in $ROOT ($((SECONDS - start)) s)"
