# paddock_test_redis_server: a throwaway redis-server for one test or one
# benchmark run (redis_server.h), and child processes (child_process.h).
# Included by the Redis tests and by the replay (--shared=redis), whichever
# comes first defines it; needs paddock::hiredis (cmake/redis.cmake).
if(NOT TARGET paddock_test_redis_server)
  add_library(
    paddock_test_redis_server STATIC
    "${CMAKE_CURRENT_LIST_DIR}/redis_server.cc"
    "${CMAKE_CURRENT_LIST_DIR}/child_process.cc"
    "${CMAKE_CURRENT_LIST_DIR}/redis_cluster.cc")
  target_include_directories(paddock_test_redis_server
                             PUBLIC "${CMAKE_CURRENT_LIST_DIR}")
  target_compile_features(paddock_test_redis_server PUBLIC cxx_std_20)
  target_link_libraries(
    paddock_test_redis_server
    PUBLIC absl::status absl::statusor absl::time
    PRIVATE absl::strings paddock::hiredis paddock_warnings)
endif()
