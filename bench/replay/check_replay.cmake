# Runs paddock_replay at a tiny time scale for every policy and checks its
# JSON and CSV: the shape, and only facts that hold at any scale and on any
# machine (tiny scales make the ttl comparable to a load, so no latency or
# count is compared with the seeds here).
#
#   cmake -DREPLAY=path/to/paddock_replay -DOUT_DIR=dir
#         [-DSCENARIO=hotkey-200rps] [-DTIME_SCALE=0.02]
#         [-DBACKEND=cpu] [-DPODS=1] [-DSHARED=none]
#         [-DSTATEMENTS=n] (postgres: SQL statements per rebuild)
#         -P check_replay.cmake
#
# Exits quietly (printing SKIP) when the replay reports that a server it
# needs (PostgreSQL, redis-server) is not installed (exit code 77).
#
# The replay gets REPLAY_TIMEOUT seconds (default 200), less than the ctest
# TIMEOUT of the test that runs this script, so that a hung replay is killed
# here and its output printed, not lost with this script.

cmake_minimum_required(VERSION 3.20)

if(NOT REPLAY OR NOT OUT_DIR)
  message(FATAL_ERROR "usage: cmake -DREPLAY=... -DOUT_DIR=... -P ${CMAKE_CURRENT_LIST_FILE}")
endif()
if(NOT DEFINED TIME_SCALE)
  set(TIME_SCALE 0.02)
endif()
if(NOT DEFINED SCENARIO)
  set(SCENARIO hotkey-200rps)
endif()
if(NOT DEFINED BACKEND)
  set(BACKEND cpu)
endif()
if(NOT DEFINED PODS)
  set(PODS 1)
endif()
if(NOT DEFINED SHARED)
  set(SHARED none)
endif()
if(NOT DEFINED REPLAY_TIMEOUT)
  set(REPLAY_TIMEOUT 200)
endif()
if(BACKEND STREQUAL "postgres" AND NOT DEFINED STATEMENTS)
  message(FATAL_ERROR "-DSTATEMENTS=... is needed with -DBACKEND=postgres")
endif()
set(test_name "replay (${SCENARIO}, ${BACKEND}, ${PODS} pod(s), shared ${SHARED})")

file(MAKE_DIRECTORY "${OUT_DIR}")
set(json_path "${OUT_DIR}/replay.json")
set(csv_path "${OUT_DIR}/replay.csv")
file(REMOVE "${json_path}" "${csv_path}")

execute_process(
  COMMAND "${REPLAY}" --scenario=${SCENARIO} --policy=all
          --time-scale=${TIME_SCALE} --json=${json_path} --csv=${csv_path}
          --backend=${BACKEND} --pods=${PODS} --shared=${SHARED}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT ${REPLAY_TIMEOUT})
message("${out}")
if(err)
  message("${err}")
endif()
if(rc EQUAL 77)
  message("SKIP: ${test_name}: a server it needs is not installed")
  return()
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "paddock_replay failed: ${rc}")
endif()

set(failures 0)
macro(expect condition_text)
  if(NOT (${ARGN}))
    message(SEND_ERROR "${test_name}: expected ${condition_text}")
    math(EXPR failures "${failures} + 1")
  endif()
endmacro()

# Reads a member; a missing one is a failure of the JSON's shape.
function(get out)
  string(JSON value ERROR_VARIABLE error GET "${json}" ${ARGN})
  if(error)
    message(SEND_ERROR "${test_name}: JSON member missing: ${ARGN} (${error})")
    set(value "")
  endif()
  set(${out} "${value}" PARENT_SCOPE)
endfunction()

# Writes `milli` / 1000 as a decimal with three places ("-0.002", "2.400").
function(milli_to_decimal out milli)
  set(sign "")
  if(milli LESS 0)
    set(sign "-")
    math(EXPR milli "0 - ${milli}")
  endif()
  math(EXPR whole "${milli} / 1000")
  math(EXPR frac "${milli} % 1000 + 1000")
  string(SUBSTRING "${frac}" 1 3 frac)
  set(${out} "${sign}${whole}.${frac}" PARENT_SCOPE)
endfunction()

file(READ "${json_path}" json)
get(scenario scenario)
get(time_scale time_scale)
expect("scenario ${SCENARIO}, got ${scenario}" scenario STREQUAL SCENARIO)
expect("time_scale ${TIME_SCALE}, got ${time_scale}" time_scale EQUAL ${TIME_SCALE})

string(JSON count LENGTH "${json}" results)
set(policies none NaiveJitter SingleFlight XFetch SoftTtl)
list(LENGTH policies expected_count)
expect("${expected_count} results, got ${count}" count EQUAL expected_count)

math(EXPR last "${count} - 1")
foreach(i RANGE ${last})
  get(policy results ${i} policy)
  list(GET policies ${i} expected_policy)
  expect("result ${i} is ${expected_policy}, got ${policy}"
         policy STREQUAL expected_policy)
  foreach(field requests completed failed throughput_rps expiries
                worker_saturation)
    get(${field} results ${i} ${field})
  endforeach()
  foreach(q p50 p95 p99 max)
    get(latency_${q} results ${i} latency_ms ${q})
    get(hot_latency_${q} results ${i} hot_key latency_ms ${q})
    get(generator_lag_${q} results ${i} generator_lag_ms ${q})
  endforeach()
  foreach(field requests loads max_concurrent_loads stale_served
                max_stale_age_ms)
    get(hot_${field} results ${i} hot_key ${field})
  endforeach()
  set(hot_loads_${policy} ${hot_loads})
  foreach(field kind queries max_busy pool)
    get(backend_${field} results ${i} backend ${field})
  endforeach()
  get(backend_cpu_busy results ${i} backend cpu busy)
  get(backend_cpu_db results ${i} backend cpu db)
  foreach(field pods shared loads loads_per_expiry)
    get(fleet_${field} results ${i} fleet ${field})
  endforeach()

  math(EXPR ended "${completed} + ${failed}")
  expect("${policy}: requests > 0, got ${requests}" requests GREATER 0)
  expect("${policy}: completed + failed == requests, got ${ended} != ${requests}"
         ended EQUAL requests)
  expect("${policy}: hot_key.requests > 0, got ${hot_requests}"
         hot_requests GREATER 0)
  expect("${policy}: p50 <= p95 <= p99 <= max"
         NOT latency_p50 GREATER latency_p95 AND NOT latency_p95 GREATER
         latency_p99 AND NOT latency_p99 GREATER latency_max)
  expect("${policy}: worker_saturation in [0, 1], got ${worker_saturation}"
         NOT worker_saturation LESS 0 AND NOT worker_saturation GREATER 1)
  expect("${policy}: at least one load of the hot key, got ${hot_loads}"
         hot_loads GREATER 0)
  if(policy STREQUAL "none")
    expect("none: no expiries without a cache, got ${expiries}" expiries EQUAL 0)
    expect("none: at most one rebuild per hot request"
           NOT hot_loads GREATER hot_requests)
  else()
    expect("${policy}: expiries > 0, got ${expiries}" expiries GREATER 0)
  endif()
  # Every pod coalesces its own loads: at most one per pod at a time.
  if(policy MATCHES "^(SingleFlight|XFetch|SoftTtl)$")
    expect("${policy}: 1 <= hot_key.max_concurrent_loads <= ${PODS} pods, got ${hot_max_concurrent_loads}"
           NOT hot_max_concurrent_loads LESS 1 AND NOT hot_max_concurrent_loads GREATER PODS)
  endif()

  # The fleet and the backend.
  expect("${policy}: backend.kind ${BACKEND}, got ${backend_kind}"
         backend_kind STREQUAL BACKEND)
  expect("${policy}: fleet.pods ${PODS}, got ${fleet_pods}" fleet_pods EQUAL PODS)
  expect("${policy}: fleet.shared ${SHARED}, got ${fleet_shared}"
         fleet_shared STREQUAL SHARED)
  expect("${policy}: fleet.loads == hot_key.loads, got ${fleet_loads} != ${hot_loads}"
         fleet_loads EQUAL hot_loads)
  string(JSON per_expiry_type TYPE "${json}" results ${i} fleet loads_per_expiry)
  if(policy STREQUAL "none")
    expect("none: fleet.loads_per_expiry null, got ${per_expiry_type}"
           per_expiry_type STREQUAL "NULL")
  else()
    # if(LESS/GREATER) compare decimals; the bounds are loads / expiries
    # +- 0.002, written out with three decimals.
    math(EXPR low "${fleet_loads} * 1000 / ${expiries} - 2")
    math(EXPR high "${fleet_loads} * 1000 / ${expiries} + 3")
    milli_to_decimal(low "${low}")
    milli_to_decimal(high "${high}")
    expect("${policy}: fleet.loads_per_expiry = loads / expiries, got ${fleet_loads_per_expiry} for ${fleet_loads} / ${expiries}"
           NOT fleet_loads_per_expiry LESS low AND NOT fleet_loads_per_expiry GREATER high)
  endif()
  if(policy STREQUAL "SingleFlight" AND SHARED STREQUAL "none")
    # Each pod loads once per expiry, plus at most one cold start each.
    math(EXPR bound "${PODS} * (${expiries} + 1)")
    expect("SingleFlight: at most one load per pod and expiry (+1), got ${fleet_loads} > ${bound}"
           NOT fleet_loads GREATER bound)
  endif()
  if(policy STREQUAL "SingleFlight" AND SHARED MATCHES "^redis")
    # One load per expiry for the whole fleet: the pods share one lease.
    # 1.5 leaves room for a cold start and a lease lost at a busy moment.
    expect("SingleFlight: fleet.loads_per_expiry <= 1.5 with a shared tier, got ${fleet_loads_per_expiry}"
           NOT fleet_loads_per_expiry GREATER 1.5)
  endif()
  if(BACKEND STREQUAL "postgres")
    # A rebuild runs STATEMENTS statements, one connection at a time (a load
    # cut short at the end of the run may run fewer).
    math(EXPR most_queries "${fleet_loads} * ${STATEMENTS}")
    expect("${policy}: hot_key.loads <= backend.queries <= ${STATEMENTS} x loads, got ${backend_queries} for ${fleet_loads} loads"
           NOT backend_queries LESS fleet_loads AND NOT backend_queries GREATER most_queries)
    math(EXPR most_busy "${PODS} * ${backend_pool}")
    expect("${policy}: 1 <= backend.max_busy <= ${most_busy}, got ${backend_max_busy}"
           NOT backend_max_busy LESS 1 AND NOT backend_max_busy GREATER most_busy)
    if(policy MATCHES "^(SingleFlight|XFetch|SoftTtl)$")
      expect("${policy}: backend.max_busy <= ${PODS} (one load per pod), got ${backend_max_busy}"
             NOT backend_max_busy GREATER PODS)
    endif()
    expect("${policy}: backend.cpu.db in [0, 1], got ${backend_cpu_db}"
           NOT backend_cpu_db LESS 0 AND NOT backend_cpu_db GREATER 1)
  else()
    string(JSON cpu_busy_type TYPE "${json}" results ${i} backend cpu busy)
    expect("${policy}: no queries without a database, got ${backend_queries}"
           backend_queries EQUAL 0 AND backend_max_busy EQUAL 0)
    expect("${policy}: backend.cpu.busy null without a database, got ${cpu_busy_type}"
           cpu_busy_type STREQUAL "NULL")
  endif()
endforeach()

# Each pod on its own: NaiveJitter does not coalesce, SingleFlight does. With
# a shared tier both take the key's lease for the fleet and load about once
# per expiry, either one a little more by chance.
if(SHARED STREQUAL "none")
  expect("NaiveJitter loads (${hot_loads_NaiveJitter}) >= SingleFlight loads (${hot_loads_SingleFlight})"
         NOT hot_loads_NaiveJitter LESS hot_loads_SingleFlight)
endif()

# The CSV: its header and at least one row per policy.
file(STRINGS "${csv_path}" csv_lines)
list(GET csv_lines 0 header)
expect("the CSV header, got ${header}"
       header STREQUAL "policy,time_s,arrivals,completed,failed,p95_ms,loads_in_flight_max,busy_workers_max,stale_served,server_cpu_replay,server_cpu_other,db_busy_max")
foreach(policy IN LISTS policies)
  set(rows ${csv_lines})
  list(FILTER rows INCLUDE REGEX "^${policy},")
  list(LENGTH rows row_count)
  expect("CSV rows for ${policy}" row_count GREATER 0)
endforeach()

if(BACKEND STREQUAL "postgres")
  set(rows ${csv_lines})
  list(FILTER rows INCLUDE REGEX "^none,.*,[1-9][0-9]*$")
  list(LENGTH rows busy_rows)
  expect("CSV seconds of none with db_busy_max > 0" busy_rows GREATER 0)
endif()

if(failures GREATER 0)
  message(FATAL_ERROR "${test_name}: ${failures} check(s) failed")
endif()
message("${test_name}: all checks passed")
