#!/usr/bin/env bash
# Installs every build and test dependency of Tandem from Debian packages.
# Idempotent: packages already present are skipped, so re-running is cheap.
set -euo pipefail

PKGS=(
  cmake g++ make pkg-config ninja-build
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libdnnl-dev libhwloc-dev libnuma-dev
  nlohmann-json3-dev libcpp-httplib-dev prometheus-cpp-dev
  libspdlog-dev libfmt-dev libcli11-dev libpcre2-dev libutf8proc-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi
