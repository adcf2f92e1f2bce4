# One bounded fuzzing run, for the ctest fuzz.NAME that meshtrain_add_fuzzer registers:
#   cmake -DFUZZER=exe -DWORK=dir -DSEEDS="a;b" [-DWRITES_SEEDS=ON] [-DDICT=file] -DSECONDS=60 -DRSS_MB=2048 [-DSEED=1]
#         -P run_fuzzer.cmake
# WORK/seeds is rebuilt each run (committed seeds + those `FUZZER -write_seeds=DIR` writes with the
# project's writers, tests/fuzz_support.h); WORK/corpus keeps what earlier
# runs found (delete it to start afresh); WORK/artifacts receives crash-*, leak-*, timeout-*, oom-*.
# Fails (listing the artifacts) when libFuzzer finds anything.
foreach(v FUZZER WORK SECONDS RSS_MB)
  if(NOT DEFINED ${v} OR "${${v}}" STREQUAL "")
    message(FATAL_ERROR "run_fuzzer.cmake: -D${v}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${WORK}/seeds" "${WORK}/artifacts")
file(MAKE_DIRECTORY "${WORK}/seeds" "${WORK}/corpus" "${WORK}/artifacts")
foreach(s IN LISTS SEEDS)
  if(IS_DIRECTORY "${s}")
    file(GLOB files "${s}/*")
    file(COPY ${files} DESTINATION "${WORK}/seeds")
  elseif(EXISTS "${s}")
    file(COPY "${s}" DESTINATION "${WORK}/seeds")
  else()
    message(FATAL_ERROR "run_fuzzer.cmake: seed ${s} does not exist")
  endif()
endforeach()
if(WRITES_SEEDS)
  execute_process(COMMAND "${FUZZER}" "-write_seeds=${WORK}/seeds" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "run_fuzzer.cmake: ${FUZZER} -write_seeds=${WORK}/seeds failed (${rc})")
  endif()
endif()

# New inputs go to the first directory (the scratch corpus); the seeds are read only.
# A fixed seed by default; -DSEED=0 lets libFuzzer pick one (for longer hunts by hand).
if(NOT DEFINED SEED)
  set(SEED 1)
endif()
set(args -max_total_time=${SECONDS} -rss_limit_mb=${RSS_MB} -malloc_limit_mb=${RSS_MB} -timeout=10 -seed=${SEED}
         -print_final_stats=1 -artifact_prefix=${WORK}/artifacts/)
if(DICT)
  list(APPEND args -dict=${DICT})
endif()
execute_process(COMMAND "${FUZZER}" ${args} "${WORK}/corpus" "${WORK}/seeds" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(GLOB found "${WORK}/artifacts/*")
  message(FATAL_ERROR "fuzzer ${FUZZER} failed (${rc}); inputs that reproduce it: ${found}\n"
                      "rerun one with: ${FUZZER} FILE")
endif()
