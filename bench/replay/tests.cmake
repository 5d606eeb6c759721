# The replay's smoke tests: every policy at a tiny time scale, then the
# JSON's shape and the structural facts (check_replay.cmake). Included by
# bench/CMakeLists.txt; a test exists only when testing is enabled.
if(TARGET paddock_replay)
  add_test(
    NAME replay.smoke
    COMMAND
      ${CMAKE_COMMAND} -DREPLAY=$<TARGET_FILE:paddock_replay>
      -DOUT_DIR=${CMAKE_CURRENT_BINARY_DIR}/replay_smoke -P
      ${CMAKE_CURRENT_LIST_DIR}/check_replay.cmake)
  # The replay pins its server to one CPU and measures it: run it alone.
  set_tests_properties(replay.smoke PROPERTIES RUN_SERIAL TRUE TIMEOUT 240
                                               LABELS "bench;replay")
endif()

# Seed 004's member page against a throwaway PostgreSQL, served by two pods
# sharing a throwaway Redis: SingleFlight loads about once per expiry for the
# fleet. Skipped when no PostgreSQL server is installed.
if(TARGET paddock_replay
   AND TARGET paddock_example_postgres
   AND TARGET paddock::redis)
  add_test(
    NAME replay.postgres_smoke
    COMMAND
      ${CMAKE_COMMAND} -DREPLAY=$<TARGET_FILE:paddock_replay>
      -DOUT_DIR=${CMAKE_CURRENT_BINARY_DIR}/replay_postgres_smoke
      -DSCENARIO=member-page-90rps -DBACKEND=postgres -DPODS=2 -DSHARED=redis
      -DSTATEMENTS=2 -P ${CMAKE_CURRENT_LIST_DIR}/check_replay.cmake)
  set_tests_properties(
    replay.postgres_smoke
    PROPERTIES RUN_SERIAL TRUE TIMEOUT 300 LABELS "bench;replay;postgres;redis"
               SKIP_REGULAR_EXPRESSION "SKIP: replay")
endif()

# Seed 000's hot key served by three pods sharing a throwaway Redis Cluster
# (3 masters, 3 replicas on loopback ports): SingleFlight loads about once
# per expiry for the fleet, whichever node holds the key. Skipped when no
# redis-server is installed.
if(TARGET paddock_replay AND TARGET paddock::redis)
  add_test(
    NAME replay.cluster_smoke
    COMMAND
      ${CMAKE_COMMAND} -DREPLAY=$<TARGET_FILE:paddock_replay>
      -DOUT_DIR=${CMAKE_CURRENT_BINARY_DIR}/replay_cluster_smoke -DPODS=3
      -DSHARED=redis-cluster -P ${CMAKE_CURRENT_LIST_DIR}/check_replay.cmake)
  set_tests_properties(
    replay.cluster_smoke
    PROPERTIES RUN_SERIAL TRUE TIMEOUT 300 LABELS "bench;replay;redis"
               SKIP_REGULAR_EXPRESSION "SKIP: replay")
endif()
