# libFuzzer targets of the readers of outside bytes (token shards, llm.c weights, checkpoint
# manifests and shard files, tokenizer files, config files). With MESHTRAIN_FUZZ=ON (clang only):
# every meshtrain library is compiled with -fsanitize=fuzzer-no-link, so the fuzzer sees coverage
# inside the readers, and each target is a libFuzzer executable with a bounded ctest run.
# With MESHTRAIN_FUZZ=OFF meshtrain_add_fuzzer does nothing: the default build is unchanged.
# defines: meshtrain_add_fuzzer, MESHTRAIN_FUZZ_SECONDS, MESHTRAIN_FUZZ_RSS_MB

set(MESHTRAIN_FUZZ_SECONDS 45 CACHE STRING "Seconds each fuzz.NAME ctest run fuzzes (-max_total_time)")
set(MESHTRAIN_FUZZ_RSS_MB 2048 CACHE STRING "Memory limit of one fuzzer process (-rss_limit_mb, -malloc_limit_mb)")

if(MESHTRAIN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "MESHTRAIN_FUZZ=ON needs clang (libFuzzer): this build uses ${CMAKE_CXX_COMPILER_ID} "
                        "${CMAKE_CXX_COMPILER}. Use the asan preset, or configure with -DCMAKE_CXX_COMPILER=clang++-16 "
                        "(Debian: clang-16, libclang-rt-16-dev, libomp-16-dev).")
  endif()
  # Every target links meshtrain_warnings, so this reaches all library code.
  target_compile_options(meshtrain_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
  target_link_options(meshtrain_warnings INTERFACE -fsanitize=fuzzer-no-link)
endif()

# meshtrain_add_fuzzer(NAME SOURCES ... [LIBS ...] [SEEDS dir|files ...] [WRITES_SEEDS] [DICT file]):
# a libFuzzer executable NAME (its LLVMFuzzerTestOneInput in SOURCES) and the ctest fuzz.NAME
# (label `fuzz`), which fuzzes for MESHTRAIN_FUZZ_SECONDS with a fixed seed. Its corpus is a
# scratch directory under the build dir, started from SEEDS (committed files or directories) and,
# with WRITES_SEEDS, from what `NAME -write_seeds=DIR` writes (tests/fuzz_support.h): the project's
# own writers make valid inputs, so the fuzzer starts past the header checks.
# Crashes, leaks, timeouts and OOMs land in <build>/fuzz/NAME/artifacts/ and fail the test; each
# one found becomes a regression test next to the reader (see docs/RELIABILITY.md).
function(meshtrain_add_fuzzer name)
  if(NOT MESHTRAIN_FUZZ)
    return()
  endif()
  cmake_parse_arguments(F "WRITES_SEEDS" "DICT" "SOURCES;LIBS;SEEDS" ${ARGN})
  add_executable(${name} ${F_SOURCES})
  target_link_libraries(${name} PRIVATE ${F_LIBS} meshtrain_warnings)
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)

  set(work ${CMAKE_BINARY_DIR}/fuzz/${name})
  set(seeds "")
  foreach(s IN LISTS F_SEEDS)
    if(NOT IS_ABSOLUTE "${s}")
      set(s ${CMAKE_CURRENT_SOURCE_DIR}/${s})
    endif()
    list(APPEND seeds "${s}")
  endforeach()
  set(writes_seeds OFF)
  if(F_WRITES_SEEDS)
    set(writes_seeds ON)
  endif()
  set(dict "")
  if(F_DICT)
    set(dict ${CMAKE_CURRENT_SOURCE_DIR}/${F_DICT})
  endif()
  # The run itself is scripts of cmake -P: portable, and no shell quoting of the seed lists.
  add_test(NAME fuzz.${name}
           COMMAND ${CMAKE_COMMAND}
                   -DFUZZER=$<TARGET_FILE:${name}> -DWORK=${work} "-DSEEDS=${seeds}" -DWRITES_SEEDS=${writes_seeds}
                   -DDICT=${dict} -DSECONDS=${MESHTRAIN_FUZZ_SECONDS} -DRSS_MB=${MESHTRAIN_FUZZ_RSS_MB}
                   -P ${PROJECT_SOURCE_DIR}/cmake/run_fuzzer.cmake)
  math(EXPR timeout "${MESHTRAIN_FUZZ_SECONDS} + 120")
  # The sanitizer options come from the environment (the asan test preset keeps LeakSanitizer on:
  # a reader that leaks on a bad file is a finding too). One OpenMP thread: runs go two at a time.
  set_tests_properties(fuzz.${name} PROPERTIES LABELS "fuzz" TIMEOUT ${timeout}
                       ENVIRONMENT "OMP_WAIT_POLICY=passive;OMP_NUM_THREADS=1")
  if(TARGET meshtrain_asan_set)  # what ./test builds in the asan preset (cmake/MeshtrainTesting.cmake)
    add_dependencies(meshtrain_asan_set ${name})
  endif()
endfunction()
