# paddock::asio: the asio adapter (include/paddock/asio.h), header-only. A
# target of its own, so that the core target never needs asio: it adds
# standalone asio's include directory (as a SYSTEM one: asio's headers do not
# trip a consumer's warning flags), C++20 (for use_awaitable) and threads to
# paddock::paddock. Defined when standalone asio (<asio.hpp>, Debian's
# libasio-dev) is found, unless -DPADDOCK_WITH_ASIO=OFF.
#
# Sets PADDOCK_WITH_ASIO (the option) for paddockConfig.cmake.in, the tests
# and the examples.

find_path(
  PADDOCK_ASIO_INCLUDE_DIR asio.hpp
  DOC "The directory holding standalone asio's asio.hpp")

set(_paddock_asio_found OFF)
if(PADDOCK_ASIO_INCLUDE_DIR)
  set(_paddock_asio_found ON)
endif()

option(PADDOCK_WITH_ASIO
       "Define paddock::asio, the asio adapter (needs standalone asio)"
       ${_paddock_asio_found})

if(NOT PADDOCK_WITH_ASIO)
  message(STATUS "paddock: paddock::asio not defined (PADDOCK_WITH_ASIO=OFF)")
  return()
endif()
if(NOT _paddock_asio_found)
  message(
    FATAL_ERROR
      "PADDOCK_WITH_ASIO is ON but standalone asio (asio.hpp) was not found: "
      "install libasio-dev (scripts/install-deps) or set "
      "PADDOCK_ASIO_INCLUDE_DIR")
endif()

file(STRINGS "${PADDOCK_ASIO_INCLUDE_DIR}/asio/version.hpp" _paddock_asio_line
     REGEX "^#define ASIO_VERSION [0-9]+")
string(REGEX REPLACE "^#define ASIO_VERSION ([0-9]+).*" "\\1"
                     _paddock_asio_number "${_paddock_asio_line}")
math(EXPR _paddock_asio_major "${_paddock_asio_number} / 100000")
math(EXPR _paddock_asio_minor "${_paddock_asio_number} / 100 % 1000")
math(EXPR _paddock_asio_patch "${_paddock_asio_number} % 100")
set(PADDOCK_ASIO_VERSION
    "${_paddock_asio_major}.${_paddock_asio_minor}.${_paddock_asio_patch}")
# Per-operation cancellation slots arrived in asio 1.19.
if(PADDOCK_ASIO_VERSION VERSION_LESS 1.19)
  message(
    FATAL_ERROR
      "paddock::asio needs standalone asio 1.19 or newer (cancellation "
      "slots), found ${PADDOCK_ASIO_VERSION} in ${PADDOCK_ASIO_INCLUDE_DIR}")
endif()
message(STATUS "paddock: paddock::asio with standalone asio "
               "${PADDOCK_ASIO_VERSION} (${PADDOCK_ASIO_INCLUDE_DIR})")

# Imported, hence SYSTEM; GLOBAL, so that a project including paddock with
# add_subdirectory can link paddock::asio from any directory.
if(NOT TARGET paddock::standalone_asio)
  add_library(paddock::standalone_asio INTERFACE IMPORTED GLOBAL)
  set_target_properties(
    paddock::standalone_asio PROPERTIES INTERFACE_INCLUDE_DIRECTORIES
                                        "${PADDOCK_ASIO_INCLUDE_DIR}")
endif()

add_library(paddock_asio INTERFACE)
add_library(paddock::asio ALIAS paddock_asio)
set_target_properties(paddock_asio PROPERTIES EXPORT_NAME asio)
target_compile_features(paddock_asio INTERFACE cxx_std_20)
# asio (1.22 at least) detects C++20 coroutines (co_await, asio::awaitable)
# on clang only through the Coroutines TS, which clang with libstdc++ does not
# offer, so asio::awaitable would not exist there: say so for clang. paddock
# needs C++20 coroutines anyway (clang 14 or newer), and asio skips its own
# detection when this is set.
target_compile_definitions(
  paddock_asio INTERFACE $<$<CXX_COMPILER_ID:Clang>:ASIO_HAS_CO_AWAIT=1>)
# Exported by name: the installed config re-creates paddock::standalone_asio
# where it finds asio on the consumer's machine (as paddock::hiredis).
target_link_libraries(
  paddock_asio INTERFACE paddock::paddock paddock::standalone_asio
                         Threads::Threads)

# For paddock's own users of paddock::asio (tests, examples), never exported:
# clang 14's UBSan `function` check cannot compile asio's coroutines (a known
# backend bug: "error in backend: Cannot represent a difference across
# sections"), so those programs go without that one check under the `address`
# preset; every other check stays on.
add_library(paddock_asio_sanitizer_workaround INTERFACE)
if(PADDOCK_IS_CLANG AND PADDOCK_SANITIZE STREQUAL "address")
  target_compile_options(paddock_asio_sanitizer_workaround
                         INTERFACE -fno-sanitize=function)
endif()

if(PADDOCK_INSTALL)
  install(TARGETS paddock_asio EXPORT paddockTargets)
  # paddock-asio.pc, beside paddock.pc: standalone asio has no .pc of its own,
  # so its include directory goes in Cflags unless it is the system's.
  if(PADDOCK_ASIO_INCLUDE_DIR STREQUAL "/usr/include")
    set(PADDOCK_PC_ASIO_CFLAGS "")
  else()
    set(PADDOCK_PC_ASIO_CFLAGS "-I${PADDOCK_ASIO_INCLUDE_DIR}")
  endif()
  function(_paddock_asio_write_pc)
    configure_file("${PROJECT_SOURCE_DIR}/cmake/paddock-asio.pc.in"
                   "${PROJECT_BINARY_DIR}/paddock-asio.pc" @ONLY)
    install(FILES "${PROJECT_BINARY_DIR}/paddock-asio.pc"
            DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  endfunction()
  cmake_language(DEFER CALL _paddock_asio_write_pc)
endif()
