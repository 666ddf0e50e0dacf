# bench/mooncake_trace.py turns a trace in the Mooncake format (prompt blocks named by hash ids)
# into a `bench routing --trace` file whose prompts share exactly the blocks their ids share,
# and the replay runs it. Run with -DKVC=<kvcascade> -DSCRIPT=<mooncake_trace.py> -DWORK=<dir>.
file(MAKE_DIRECTORY "${WORK}")
set(in "${WORK}/mooncake-in.jsonl")
set(out "${WORK}/mooncake-out.jsonl")
# Requests 1 and 2 share blocks 7 and 8 (1,024 bytes); request 3 is block 7 cut to 100 bytes;
# request 4 shares nothing. Timestamps in ms.
file(WRITE "${in}" [=[{"timestamp": 5000, "input_length": 1300, "output_length": 4, "hash_ids": [7, 8, 9]}
{"timestamp": 5500, "input_length": 1100, "output_length": 3, "hash_ids": [7, 8, 10]}
{"timestamp": 6000, "input_length": 100, "output_length": 2, "hash_ids": [7]}
{"timestamp": 7000, "input_length": 600, "output_length": 5, "hash_ids": [11, 12]}
]=])
execute_process(COMMAND python3 "${SCRIPT}" "${in}" "${out}" --time-scale 2
                RESULT_VARIABLE rc OUTPUT_VARIABLE msg ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mooncake_trace.py failed (${rc}): ${msg} ${err}")
endif()
file(STRINGS "${out}" lines)
list(LENGTH lines n)
if(NOT n EQUAL 4)
  message(FATAL_ERROR "want 4 requests, got ${n}")
endif()
set(prompts)
foreach(line IN LISTS lines)
  string(JSON p GET "${line}" prompt)
  string(JSON t GET "${line}" arrival_s)
  string(JSON m GET "${line}" max_tokens)
  string(LENGTH "${p}" len)
  list(APPEND prompts "${p}")
  list(APPEND lens ${len})
  list(APPEND times ${t})
  list(APPEND maxes ${m})
endforeach()
if(NOT "${lens}" STREQUAL "1300;1100;100;600" OR NOT "${maxes}" STREQUAL "4;3;2;5")
  message(FATAL_ERROR "prompt lengths ${lens} (want 1300;1100;100;600), max_tokens ${maxes}")
endif()
list(GET times 1 t1)
list(GET times 3 t3)
if(NOT t1 EQUAL 0.25 OR NOT t3 EQUAL 1)  # (ms - first) / 1000 / 2
  message(FATAL_ERROR "arrivals ${times}")
endif()
list(GET prompts 0 p0)
list(GET prompts 1 p1)
list(GET prompts 2 p2)
string(SUBSTRING "${p0}" 0 1024 a)
string(SUBSTRING "${p1}" 0 1024 b)
string(SUBSTRING "${p0}" 1024 16 a_next)
string(SUBSTRING "${p1}" 1024 16 b_next)
string(SUBSTRING "${p0}" 0 100 a_head)
if(NOT a STREQUAL b OR a_next STREQUAL b_next OR NOT p2 STREQUAL a_head)
  message(FATAL_ERROR "shared blocks differ, or unshared ones agree")
endif()
execute_process(COMMAND ${KVC} bench routing --trace "${out}" --replicas 2 --policy kvcascade
                        --no-progress
                RESULT_VARIABLE rc OUTPUT_VARIABLE msg ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 0 OR NOT msg MATCHES "kvcascade +1 +4 ")
  message(FATAL_ERROR "bench routing --trace failed (${rc}): ${msg} ${err}")
endif()
