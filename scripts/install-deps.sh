#!/usr/bin/env bash
# Installs Courier's build and test dependencies from Debian packages; skips what is present.
# With --aarch64, also what the aarch64 executor's cross build and its tests under qemu need
# (docs/deploy.md, "An executor on an ARM board"): the arm64 architecture, the arm64
# libraries the executor links, qemu-user-static and its binfmt_misc entry.
set -euo pipefail

packages=(cmake ninja-build pkg-config g++ python3 git curl
  llvm-22-dev libmlir-22-dev mlir-22-tools clang-22 lld-22 libclang-rt-22-dev
  libcpp-httplib-dev zlib1g-dev nlohmann-json3-dev catch2 libssl-dev openssl libbenchmark-dev libseccomp-dev
  prometheus-cpp-dev libsimdjson-dev libdragonbox-dev nginx
  python3-dev pybind11-dev python3-numpy python3-pytest libopenblas-dev libomp-22-dev)

case "${1:-}" in
  "") aarch64=false ;;
  --aarch64) aarch64=true ;;
  *) echo "install-deps: unknown option '$1' (usage: install-deps.sh [--aarch64])" >&2; exit 2 ;;
esac

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

if $aarch64; then
  # The C and C++ runtimes and the libraries courier-executor links, for arm64 (Multi-Arch:
  # same, so they sit beside the amd64 ones); the headers of LLVM and prometheus-cpp are the
  # amd64 ones above, since their arm64 -dev packages cannot be installed beside them.
  packages+=(qemu-user-static binfmt-support libc6-dev:arm64 libstdc++-12-dev:arm64
    libllvm22:arm64 libcpp-httplib-dev:arm64 libssl-dev:arm64 libseccomp-dev:arm64
    libprometheus-cpp-core1.0:arm64)
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "install-deps: adding the arm64 architecture"
    $sudo dpkg --add-architecture arm64
  fi
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  # An older OpenMP runtime's -dev package (libomp-dev, libomp-14-dev) owns libomp.so too,
  # so apt removes it to install libomp-22-dev; nothing else may go. --no-remove otherwise:
  # an arm64 library must have its amd64 twin's version; should apt want to remove packages
  # to get there, stop and say so rather than take the toolchain away.
  removals=$(apt-get install -s --no-install-recommends "${missing[@]}" 2>/dev/null |
    sed -n 's/^Remv \([^ ]*\) .*/\1/p' | tr '\n' ' ')
  others=$(for r in $removals; do [[ $r == libomp* ]] || echo "$r"; done)
  if [ -n "$removals" ] && [ -z "$others" ]; then
    echo "install-deps: removing ${removals}(an older OpenMP runtime; libomp-22-dev replaces it)"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      "${missing[@]}"
  else
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      --no-remove "${missing[@]}"
  fi
fi

if $aarch64; then
  # The kernel runs an aarch64 program through qemu once binfmt_misc has the entry: then a
  # cross-built executor starts its aarch64 workers as it does on an ARM board. Whether it
  # does is tried with the arm64 dynamic loader: a container may run them through its host's
  # entry without seeing binfmt_misc, and one without systemd may not have it mounted.
  probe=/usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1
  binfmt=/proc/sys/fs/binfmt_misc
  if ! "$probe" --version >/dev/null 2>&1; then
    if [ ! -e "$binfmt/register" ]; then
      $sudo mount -t binfmt_misc binfmt_misc "$binfmt" || {
        echo "install-deps: aarch64 programs do not run here and binfmt_misc cannot be mounted" \
          "on $binfmt to register qemu-aarch64; in a container, register it on the host" \
          "(with the F flag, as qemu-user-static's entry has) or allow the mount" >&2
        exit 1
      }
    fi
    if ! grep -qx enabled "$binfmt/qemu-aarch64" 2>/dev/null; then
      # The package's entry is imported when binfmt-support is configured before it, which one
      # apt run does not promise.
      [ -e /var/lib/binfmts/qemu-aarch64 ] || $sudo update-binfmts --import qemu-aarch64
      $sudo update-binfmts --enable qemu-aarch64
    fi
    if ! "$probe" --version >/dev/null 2>&1; then
      echo "install-deps: binfmt_misc's qemu-aarch64 entry is enabled, yet $probe does not run" >&2
      exit 1
    fi
  fi
  through=$(sed -n 's/^interpreter //p' "$binfmt/qemu-aarch64" 2>/dev/null || true)
  [ -n "$through" ] || through="an entry this container cannot see"
  echo "install-deps: aarch64 programs run here through $through"
fi
