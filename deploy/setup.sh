#!/usr/bin/env bash
# Installs every build and test dependency of Tandem from Debian packages.
# Idempotent: packages already present are skipped, so re-running is cheap.
# Usage: deploy/setup.sh [--build-only]
#   --build-only: what building the `tandem` binary needs and nothing for the
#   tests' Python (the container image's build stage, deploy/docker/).
set -euo pipefail

BUILD_ONLY=0
case "${1:-}" in
  "") ;;
  --build-only) BUILD_ONLY=1 ;;
  *) echo "usage: deploy/setup.sh [--build-only]" >&2; exit 2 ;;
esac

PKGS=(
  cmake g++ make pkg-config ninja-build
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libdnnl-dev libhwloc-dev libnuma-dev
  nlohmann-json3-dev libcpp-httplib-dev prometheus-cpp-dev
  libspdlog-dev libfmt-dev libcli11-dev libpcre2-dev libutf8proc-dev
  libgtest-dev libgmock-dev libbenchmark-dev
)
# The tests' Python: the oracles, golden scripts and the openai client's venv.
((BUILD_ONLY)) || PKGS+=(python3 python3-numpy python3-venv python3-yaml)

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

((BUILD_ONLY)) && exit 0

# The service tests' Python: Debian's numpy plus the official `openai` client
# and grpcio from PyPI (test tools only; the service never imports Python).
VENV="${TANDEM_TEST_VENV:-$HOME/.cache/tandem/test-venv}"
OPENAI_VERSION="3.54.0"
GRPC_VERSION="1.85.1"  # grpcio + grpcio-tools: Python stubs of proto/client.proto
if ! "$VENV/bin/python" -c "import numpy, openai, grpc, grpc_tools, sys; sys.exit(openai.__version__ != '$OPENAI_VERSION' or grpc.__version__ != '$GRPC_VERSION')" 2>/dev/null; then
  echo "setup: making the test Python in $VENV (openai==$OPENAI_VERSION, grpcio==$GRPC_VERSION)"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "openai==$OPENAI_VERSION" \
    "grpcio==$GRPC_VERSION" "grpcio-tools==$GRPC_VERSION"
else
  echo "setup: test Python present ($VENV)"
fi
