# Cheap checks of paddock_micro under ctest (label "bench"). Google Benchmark
# prints "ERROR OCCURRED" for a run that called SkipWithError, which the
# herd workloads do when a coalescing adapter makes more than one loader call
# for one herd (of threads, or of coroutines in bench/micro/async.cc), or when
# any caller gets a wrong value.
if(TARGET paddock_micro)
  add_test(NAME paddock_micro_cold_key_herd_coalesces
           COMMAND paddock_micro --benchmark_filter=^BM_ColdKeyHerd
                   --benchmark_min_time=0.01)
  add_test(NAME paddock_micro_async_cold_key_herd_coalesces
           COMMAND paddock_micro --benchmark_filter=BM_AsyncColdKeyHerd
                   --benchmark_min_time=0.01)
  add_test(NAME paddock_micro_smoke
           COMMAND paddock_micro
                   "--benchmark_filter=BM_(Async)?(HotKeyHit|ReadWrite|XFetch|Memory)"
                   --benchmark_min_time=0.001)
  set_tests_properties(
    paddock_micro_cold_key_herd_coalesces
    paddock_micro_async_cold_key_herd_coalesces paddock_micro_smoke
    PROPERTIES FAIL_REGULAR_EXPRESSION "ERROR OCCURRED"
               LABELS bench
               TIMEOUT 300)
  # BM_SharedMiss, built with paddock::redis: starts its own redis-server,
  # and registers nothing without one.
  if(TARGET paddock::redis)
    add_test(NAME paddock_micro_shared_miss_smoke
             COMMAND paddock_micro "--benchmark_filter=BM_SharedMiss"
                     --benchmark_min_time=0.01)
    set_tests_properties(
      paddock_micro_shared_miss_smoke
      PROPERTIES FAIL_REGULAR_EXPRESSION "ERROR OCCURRED"
                 LABELS "bench;redis"
                 TIMEOUT 300)
  endif()
endif()
