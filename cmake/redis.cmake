# paddock::redis: the Redis shared tier (include/paddock/redis.h, src/redis/).
# A target of its own, so that the core target never links hiredis. Built
# when hiredis is found, unless -DPADDOCK_WITH_REDIS=OFF.
#
# Sets PADDOCK_WITH_REDIS (the option) for paddockConfig.cmake.in and the
# tests.

find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_HIREDIS QUIET hiredis)
endif()
# hiredis.pc's includedir is .../include/hiredis; paddock includes
# <hiredis/hiredis.h>, so search from its parent.
set(_paddock_hiredis_include_hints)
foreach(_dir IN LISTS PC_HIREDIS_INCLUDE_DIRS PC_HIREDIS_INCLUDEDIR)
  get_filename_component(_parent "${_dir}" DIRECTORY)
  list(APPEND _paddock_hiredis_include_hints "${_dir}" "${_parent}")
endforeach()
find_path(
  PADDOCK_HIREDIS_INCLUDE_DIR hiredis/hiredis.h
  HINTS ${_paddock_hiredis_include_hints}
  DOC "The directory holding hiredis/hiredis.h")
find_library(
  PADDOCK_HIREDIS_LIBRARY
  NAMES hiredis
  HINTS ${PC_HIREDIS_LIBRARY_DIRS} ${PC_HIREDIS_LIBDIR}
  DOC "The hiredis library")

set(_paddock_hiredis_found OFF)
if(PADDOCK_HIREDIS_INCLUDE_DIR AND PADDOCK_HIREDIS_LIBRARY)
  set(_paddock_hiredis_found ON)
endif()

option(PADDOCK_WITH_REDIS "Build paddock::redis, the Redis shared tier (needs hiredis)"
       ${_paddock_hiredis_found})

if(NOT PADDOCK_WITH_REDIS)
  message(STATUS "paddock: paddock::redis not built (PADDOCK_WITH_REDIS=OFF)")
  return()
endif()
if(NOT _paddock_hiredis_found)
  message(
    FATAL_ERROR
      "PADDOCK_WITH_REDIS is ON but hiredis was not found: install libhiredis-dev "
      "(scripts/install-deps) or set PADDOCK_HIREDIS_INCLUDE_DIR and "
      "PADDOCK_HIREDIS_LIBRARY")
endif()
message(STATUS "paddock: paddock::redis with hiredis ${PC_HIREDIS_VERSION} "
               "(${PADDOCK_HIREDIS_LIBRARY})")
# TLS (RedisOptions::tls): hiredis 0.14 has none, so the tier runs TLS on
# OpenSSL itself (src/redis/tls.cc).
find_package(OpenSSL 1.1.1 REQUIRED COMPONENTS SSL Crypto)

# GLOBAL, so that a project including paddock with add_subdirectory can link
# paddock::redis from any directory.
if(NOT TARGET paddock::hiredis)
  add_library(paddock::hiredis UNKNOWN IMPORTED GLOBAL)
  set_target_properties(
    paddock::hiredis
    PROPERTIES IMPORTED_LOCATION "${PADDOCK_HIREDIS_LIBRARY}"
               INTERFACE_INCLUDE_DIRECTORIES "${PADDOCK_HIREDIS_INCLUDE_DIR}")
endif()

file(GLOB PADDOCK_REDIS_SOURCES CONFIGURE_DEPENDS
     "${CMAKE_CURRENT_SOURCE_DIR}/src/redis/*.cc")

add_library(paddock_redis ${PADDOCK_REDIS_SOURCES})
add_library(paddock::redis ALIAS paddock_redis)
set_target_properties(
  paddock_redis
  PROPERTIES EXPORT_NAME redis
             VERSION ${PROJECT_VERSION}
             SOVERSION ${PROJECT_VERSION_MAJOR})
# src/ for the private headers (redis/*.h), which tests include too.
target_include_directories(paddock_redis
                           PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/src")
target_compile_options(paddock_redis PRIVATE ${PADDOCK_WARNING_FLAGS})
target_link_libraries(
  paddock_redis
  PUBLIC paddock::paddock
  PRIVATE paddock::hiredis
          OpenSSL::SSL
          OpenSSL::Crypto
          absl::flat_hash_map
          absl::inlined_vector
          absl::random_random
          absl::span
          absl::synchronization
          Threads::Threads)

if(PADDOCK_INSTALL)
  install(
    TARGETS paddock_redis
    EXPORT paddockTargets
    ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
    LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
    RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}"
    INCLUDES
    DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
  # paddock-redis.pc, beside paddock.pc. Written at the end of the root
  # directory, once the root CMakeLists has set the PADDOCK_PC_* directories.
  # The library is static unless BUILD_SHARED_LIBS: hiredis goes in Requires.
  # So do the abseil modules and OpenSSL it links privately (the core's are
  # paddock's).
  set(_paddock_redis_private_pc
      "absl_flat_hash_map absl_inlined_vector absl_random_random absl_span absl_synchronization libssl libcrypto"
  )
  if(PC_HIREDIS_FOUND)
    set(PADDOCK_PC_REDIS_REQUIRES "paddock hiredis ${_paddock_redis_private_pc}")
    set(PADDOCK_PC_REDIS_LIBS "")
  else()
    set(PADDOCK_PC_REDIS_REQUIRES "paddock ${_paddock_redis_private_pc}")
    set(PADDOCK_PC_REDIS_LIBS "${PADDOCK_HIREDIS_LIBRARY}")
  endif()
  function(_paddock_redis_write_pc)
    configure_file("${PROJECT_SOURCE_DIR}/cmake/paddock-redis.pc.in"
                   "${PROJECT_BINARY_DIR}/paddock-redis.pc" @ONLY)
    install(FILES "${PROJECT_BINARY_DIR}/paddock-redis.pc"
            DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  endfunction()
  cmake_language(DEFER CALL _paddock_redis_write_pc)
endif()
