#!/usr/bin/env bash
# Installs every Debian package kvcascade needs to build, test and run its demo.
# Idempotent: packages already present are left alone, and apt is not touched at all when
# nothing is missing. Run as root (CI and the development machines are root) or with sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libboost1.81-dev        # not 1.74: its C++20 coroutine support is broken
  libxxhash-dev           # pkg-config: libxxhash
  nlohmann-json3-dev
  libsimdjson-dev         # the router parses long request bodies with simdjson (api/json_fast)
  libgtest-dev libgmock-dev
  libbenchmark-dev
  libcli11-dev
  libspdlog-dev
  libssl-dev              # libcrypto: SHA-256 of the router's tenant cache salts
  prometheus-cpp-dev      # prometheus-cpp::core
  prometheus              # the demo's local Prometheus server (started by the demo, not by systemd)
  curl
  nginx                   # `kvcascade bench router` compares the router with nginx's proxy_pass
  libpcre2-dev            # Unicode regexes of Hugging Face pre-tokenizers (replica/hf_tokenizer)
  libutf8proc-dev         # Unicode NFC, the normalizer of Qwen's tokenizers (replica/hf_tokenizer)
  libgoogle-perftools-dev # tcmalloc_minimal, the kvcascade binaries' allocator (KVCASCADE_TCMALLOC)
  python3                 # bench/mooncake_trace.py (tested), the results' table scripts
)
# Node.js runs the tokenizer and chat-template references (scripts/fetch-npm-refs.sh), which the
# tests compare with; KVCASCADE_NO_NPM_REFS=1 (the container build) leaves both out.
if [ "${KVCASCADE_NO_NPM_REFS:-0}" != 1 ]; then packages+=(nodejs); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "${KVCASCADE_NO_NPM_REFS:-0}" = 1 ]; then exit 0; fi

# npm: NodeSource's nodejs ships it; Debian's nodejs does not (its own package is `npm`).
if ! command -v npm >/dev/null; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm
fi

# The real Llama 3 tokenizer and the JavaScript references the golden tests were made with.
bash "$(dirname "$0")/fetch-npm-refs.sh"
