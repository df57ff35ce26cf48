#!/usr/bin/env bash
# Installs, with apt-get, whatever peregrine needs to build and test that this Debian 12 machine
# lacks. Safe to run repeatedly: it does nothing when everything is present.
set -euo pipefail
packages=(g++ cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          libpcre2-dev libicu-dev nlohmann-json3-dev libboost-dev libcpp-httplib-dev clang libclang-rt-14-dev ccache
          libopenmpi-dev openmpi-bin
          libcurl4-openssl-dev libssl-dev)
# `peregrine pull` downloads with libcurl and checks SHA-256 / SHA-1 with OpenSSL's libcrypto; its
# tests compute the hashes they expect with sha256sum and `git hash-object`.
command -v git >/dev/null || packages+=(git)
# The HF folder tests run training/export_hf.py (standard-library Python) to write their fixture.
command -v python3 >/dev/null || packages+=(python3)
# The llama.cpp oracle test runs node-llama-cpp, installed from npm by the test itself.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
# The cluster of network namespaces (scripts/netns-cluster.sh, the across-host tests) needs ip and tc.
{ command -v ip >/dev/null && command -v tc >/dev/null; } || packages+=(iproute2)
# The web page's browser test (tests/webui) drives Debian's headless chromium with puppeteer-core.
packages+=(chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
