# Runs paddock_replay at a tiny time scale for every policy and checks its
# JSON and CSV: the shape, and only facts that hold at any scale and on any
# machine (tiny scales make the ttl comparable to a load, so no latency or
# count is compared with the seeds here).
#
#   cmake -DREPLAY=path/to/paddock_replay -DOUT_DIR=dir -P check_replay.cmake

cmake_minimum_required(VERSION 3.20)

if(NOT REPLAY OR NOT OUT_DIR)
  message(FATAL_ERROR "usage: cmake -DREPLAY=... -DOUT_DIR=... -P ${CMAKE_CURRENT_LIST_FILE}")
endif()
if(NOT DEFINED TIME_SCALE)
  set(TIME_SCALE 0.02)
endif()

file(MAKE_DIRECTORY "${OUT_DIR}")
set(json_path "${OUT_DIR}/replay.json")
set(csv_path "${OUT_DIR}/replay.csv")
file(REMOVE "${json_path}" "${csv_path}")

execute_process(
  COMMAND "${REPLAY}" --scenario=hotkey-200rps --policy=all
          --time-scale=${TIME_SCALE} --json=${json_path} --csv=${csv_path}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 200)
message("${out}")
if(err)
  message("${err}")
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "paddock_replay failed: ${rc}")
endif()

set(failures 0)
macro(expect condition_text)
  if(NOT (${ARGN}))
    message(SEND_ERROR "replay.smoke: expected ${condition_text}")
    math(EXPR failures "${failures} + 1")
  endif()
endmacro()

# Reads a member; a missing one is a failure of the JSON's shape.
function(get out)
  string(JSON value ERROR_VARIABLE error GET "${json}" ${ARGN})
  if(error)
    message(SEND_ERROR "replay.smoke: JSON member missing: ${ARGN} (${error})")
    set(value "")
  endif()
  set(${out} "${value}" PARENT_SCOPE)
endfunction()

file(READ "${json_path}" json)
get(scenario scenario)
get(time_scale time_scale)
expect("scenario hotkey-200rps, got ${scenario}" scenario STREQUAL "hotkey-200rps")
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
  endforeach()
  foreach(field requests loads max_concurrent_loads stale_served
                max_stale_age_ms)
    get(hot_${field} results ${i} hot_key ${field})
  endforeach()
  set(hot_loads_${policy} ${hot_loads})

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
  if(policy MATCHES "^(SingleFlight|XFetch|SoftTtl)$")
    expect("${policy}: hot_key.max_concurrent_loads == 1, got ${hot_max_concurrent_loads}"
           hot_max_concurrent_loads EQUAL 1)
  endif()
endforeach()

expect("NaiveJitter loads (${hot_loads_NaiveJitter}) >= SingleFlight loads (${hot_loads_SingleFlight})"
       NOT hot_loads_NaiveJitter LESS hot_loads_SingleFlight)

# The CSV: its header and at least one row per policy.
file(STRINGS "${csv_path}" csv_lines)
list(GET csv_lines 0 header)
expect("the CSV header, got ${header}"
       header STREQUAL "policy,time_s,arrivals,completed,failed,p95_ms,loads_in_flight_max,busy_workers_max,stale_served,server_cpu_replay,server_cpu_other")
foreach(policy IN LISTS policies)
  set(rows ${csv_lines})
  list(FILTER rows INCLUDE REGEX "^${policy},")
  list(LENGTH rows row_count)
  expect("CSV rows for ${policy}" row_count GREATER 0)
endforeach()

if(failures GREATER 0)
  message(FATAL_ERROR "replay.smoke: ${failures} check(s) failed")
endif()
message("replay.smoke: all checks passed")
