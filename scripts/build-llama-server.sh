#!/usr/bin/env bash
# Build llama.cpp's llama-server (the gateway's llama.cpp upstream, docs/engines.md) from the llama.cpp sources
# vendored in the llama-cpp-python sdist that requirements-llamacpp.txt pins: PyPI is the only source this
# project fetches from, and the pin keeps the server and llama-cpp-python on the same llama.cpp.
#   scripts/build-llama-server.sh PIP OUT_DIR   ->  OUT_DIR/build/bin/llama-server
# CPU only, static libraries, no web UI (nothing downloaded at build time), no curl/openssl.
# CMAKE_BUILD_PARALLEL_LEVEL (default 2) bounds the compile jobs.
set -euo pipefail
pip=$1
out=$2
spec=$(grep -E '^llama-cpp-python' "$(dirname "$0")/../requirements-llamacpp.txt" | sed 's/\[server\]//')
version=${spec#*==}
mkdir -p "$out"
if [ ! -d "$out/llama_cpp_python-$version" ]; then
  "$pip" download --quiet --no-deps --no-binary :all: --dest "$out" "$spec"
  tar -xzf "$out/llama_cpp_python-$version.tar.gz" -C "$out"
fi
src="$out/llama_cpp_python-$version/vendor/llama.cpp"
cmake -S "$src" -B "$out/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >"$out/configure.log"
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} cmake --build "$out/build" --target llama-server >"$out/build.log"
"$out/build/bin/llama-server" --version
