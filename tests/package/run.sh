#!/usr/bin/env bash
# Packaging test: builds tests/package/consumer against paddock.
#
#   tests/package/run.sh MODE SOURCE_DIR WORK_DIR [BUILD_DIR]
#
# MODE is
#   find_package      configure, build and install paddock (library only) into
#                     WORK_DIR/prefix (or, given BUILD_DIR, install the
#                     library that paddock build dir already built: ctest
#                     passes its own, which saves compiling src/ again), build
#                     the consumer with
#                     find_package(paddock), run it (and, if it found GTest,
#                     the policy contract over its own policy, compiled
#                     against the installed header); build and run the
#                     consumer again where hiredis and asio cannot be found
#                     (the core must still be); then check that
#                     `pkg-config --cflags --libs paddock` builds a one-file
#                     program from the same main.cpp, and run that too.
#   add_subdirectory  build the consumer with add_subdirectory(SOURCE_DIR) and
#                     run it. The policy contract consumer is not built here:
#                     it compiles the same header from the same tree as
#                     paddock's own tests, and find_package mode compiles it
#                     against the installed copy.
# When paddock is built with paddock::redis (hiredis found), the consumer also
# builds and runs redis_main.cpp against it, and in find_package mode
# paddock-redis.pc must build it too; likewise asio_main.cpp with
# paddock::asio (asio found) and paddock-asio.pc.
# WORK_DIR is wiped first. CXX picks the compiler (default: cmake's choice, and
# g++ for the pkg-config check); CMAKE_COMMAND picks cmake.
set -euo pipefail

if [[ $# -ne 3 && $# -ne 4 ]]; then
  echo "usage: $0 find_package|add_subdirectory SOURCE_DIR WORK_DIR [BUILD_DIR]" >&2
  exit 2
fi
mode=$1
source_dir=$(cd "$2" && pwd)
work_dir=$3
build_dir=${4:-}
cmake=${CMAKE_COMMAND:-cmake}
consumer_dir="$source_dir/tests/package/consumer"

case "$mode" in
  find_package | add_subdirectory) ;;
  *)
    echo "$0: unknown mode '$mode'" >&2
    exit 2
    ;;
esac

case "$work_dir" in
  "" | / | "$source_dir")
    echo "$0: refusing to use '$work_dir' as the work dir" >&2
    exit 2
    ;;
esac
rm -rf "$work_dir"
mkdir -p "$work_dir"
work_dir=$(cd "$work_dir" && pwd)

# Release (NDEBUG, as a consumer ships) without optimisation: these builds
# check packaging, not speed, and -O0 compiles the consumers (the policy
# contract above all) in a fraction of the time.
common_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-DNDEBUG)
if [[ -n "${CXX:-}" ]]; then
  common_args+=("-DCMAKE_CXX_COMPILER=$CXX")
fi

step() { printf '\n==> %s\n' "$*"; }

# The paddock::redis consumer exists when paddock was built with it.
run_redis_consumer() {
  if [[ -x "$work_dir/consumer-build/redis_consumer" ]]; then
    step "run the redis consumer"
    "$work_dir/consumer-build/redis_consumer"
  else
    step "no paddock::redis in this build: redis consumer skipped"
  fi
}

# The paddock::asio consumer exists when paddock was built with it.
run_asio_consumer() {
  if [[ -x "$work_dir/consumer-build/asio_consumer" ]]; then
    step "run the asio consumer"
    "$work_dir/consumer-build/asio_consumer"
  else
    step "no paddock::asio in this build: asio consumer skipped"
  fi
}

# Runs the policy contract over the consumer's own policy, if the consumer
# found GTest and built it.
run_contract_consumer() {
  local exe="$work_dir/consumer-build/contract_consumer"
  if [[ -x "$exe" ]]; then
    step "run the policy contract over the consumer's policy"
    "$exe" --gtest_brief=1
  else
    step "policy contract consumer skipped: the consumer found no GTest"
  fi
}

case "$mode" in
  find_package)
    prefix="$work_dir/prefix"

    if [[ -n $build_dir ]]; then
      step "install paddock from $build_dir into $prefix"
      "$cmake" --install "$build_dir" --prefix "$prefix"
    else
      step "configure paddock ($source_dir)"
      "$cmake" -S "$source_dir" -B "$work_dir/paddock-build" \
        "${common_args[@]}" -DPADDOCK_BUILD_TESTS=OFF \
        -DPADDOCK_BUILD_BENCHMARKS=OFF -DPADDOCK_BUILD_EXAMPLES=OFF \
        "-DCMAKE_INSTALL_PREFIX=$prefix"
      step "build paddock"
      "$cmake" --build "$work_dir/paddock-build"
      step "install paddock into $prefix"
      "$cmake" --install "$work_dir/paddock-build"
    fi
    for header in paddock/testing/policy_contract.h paddock/testing/sync.h; do
      if [[ -z "$(find "$prefix" -path "*/include/$header" -print -quit)" ]]; then
        echo "$header was not installed under $prefix" >&2
        exit 1
      fi
    done

    step "configure the consumer (find_package)"
    "$cmake" -S "$consumer_dir" -B "$work_dir/consumer-build" \
      "${common_args[@]}" -DCONSUMER_MODE=find_package \
      "-DCMAKE_PREFIX_PATH=$prefix"
    step "build the consumer"
    "$cmake" --build "$work_dir/consumer-build"
    step "run the consumer"
    "$work_dir/consumer-build/consumer"
    run_redis_consumer
    run_asio_consumer
    run_contract_consumer

    # A consumer's machine may lack the optional dependencies paddock was
    # built with: find_package must still give it the core. /usr/include
    # hidden from find_path hides hiredis.h and asio.hpp (the compiler still
    # searches it).
    step "configure a core-only consumer where hiredis and asio are not found"
    "$cmake" -S "$consumer_dir" -B "$work_dir/core-consumer-build" \
      "${common_args[@]}" -DCONSUMER_MODE=find_package \
      "-DCMAKE_PREFIX_PATH=$prefix" -DCMAKE_IGNORE_PATH=/usr/include \
      -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON
    step "build and run the core-only consumer"
    "$cmake" --build "$work_dir/core-consumer-build"
    "$work_dir/core-consumer-build/consumer"

    step "pkg-config"
    pc_file=$(find "$prefix" -name paddock.pc -print -quit)
    if [[ -z "$pc_file" ]]; then
      echo "paddock.pc was not installed under $prefix" >&2
      exit 1
    fi
    export PKG_CONFIG_PATH
    PKG_CONFIG_PATH="$(dirname "$pc_file")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    pkg-config --exists --print-errors paddock
    echo "paddock $(pkg-config --modversion paddock)"
    read -r -a pc_flags <<<"$(pkg-config --cflags --libs paddock)"
    printf 'flags: %s\n' "${pc_flags[*]}"
    cxx=${CXX:-g++}
    step "compile main.cpp with $cxx and the pkg-config flags"
    "$cxx" "$consumer_dir/main.cpp" -o "$work_dir/consumer-pkg-config" \
      "${pc_flags[@]}"
    step "run the pkg-config consumer"
    "$work_dir/consumer-pkg-config"

    redis_pc=$(find "$prefix" -name paddock-redis.pc -print -quit)
    if [[ -n "$redis_pc" ]]; then
      pkg-config --exists --print-errors paddock-redis
      read -r -a redis_pc_flags <<<"$(pkg-config --cflags --libs paddock-redis)"
      printf 'flags: %s\n' "${redis_pc_flags[*]}"
      step "compile redis_main.cpp with $cxx and the paddock-redis flags"
      "$cxx" "$consumer_dir/redis_main.cpp" \
        -o "$work_dir/redis-consumer-pkg-config" "${redis_pc_flags[@]}"
      step "run the pkg-config redis consumer"
      "$work_dir/redis-consumer-pkg-config"
    fi

    asio_pc=$(find "$prefix" -name paddock-asio.pc -print -quit)
    if [[ -n "$asio_pc" ]]; then
      pkg-config --exists --print-errors paddock-asio
      read -r -a asio_pc_flags <<<"$(pkg-config --cflags --libs paddock-asio)"
      printf 'flags: %s\n' "${asio_pc_flags[*]}"
      step "compile asio_main.cpp with $cxx and the paddock-asio flags"
      "$cxx" "$consumer_dir/asio_main.cpp" \
        -o "$work_dir/asio-consumer-pkg-config" "${asio_pc_flags[@]}"
      step "run the pkg-config asio consumer"
      "$work_dir/asio-consumer-pkg-config"
    fi
    ;;

  add_subdirectory)
    step "configure the consumer (add_subdirectory $source_dir)"
    "$cmake" -S "$consumer_dir" -B "$work_dir/consumer-build" \
      "${common_args[@]}" -DCONSUMER_MODE=add_subdirectory \
      "-DPADDOCK_SOURCE_DIR=$source_dir" -DCONSUMER_CONTRACT=OFF
    step "build the consumer"
    "$cmake" --build "$work_dir/consumer-build"
    step "run the consumer"
    "$work_dir/consumer-build/consumer"
    run_redis_consumer
    run_asio_consumer
    ;;
esac

step "package test '$mode' passed"
