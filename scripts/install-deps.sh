#!/usr/bin/env bash
# Installs Courier's build and test dependencies from Debian packages; skips what is present.
set -euo pipefail

packages=(cmake ninja-build pkg-config g++ python3 git curl
  llvm-22-dev libmlir-22-dev mlir-22-tools clang-22 lld-22 libclang-rt-22-dev
  libcpp-httplib-dev nlohmann-json3-dev catch2 libssl-dev openssl libbenchmark-dev libseccomp-dev
  prometheus-cpp-dev libsimdjson-dev libdragonbox-dev nginx)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
