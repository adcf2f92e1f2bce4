# Test registration. Multi-rank tests run through mpirun at several rank counts, oversubscribed,
# with the Open MPI settings a container with few cores needs (root allowed, oversubscribed ranks
# that yield when idle; docs/LAUNCHING.md, "Environment variables that matter").
# defines: meshtrain_add_test, meshtrain_add_mpi_test, meshtrain_add_kernel_variants, MESHTRAIN_MPI_TEST_ENV, MESHTRAIN_ASAN_SET,
#          MESHTRAIN_TEST_COMPILE_OPTIONS, meshtrain_asan_set (a target)
set(MESHTRAIN_MPI_TEST_ENV
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
  OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_WAIT_POLICY=passive)

# The tests ./test runs a second time in the asan preset (AddressSanitizer, UBSan, LeakSanitizer),
# with the fuzz label: they get the label `asan`, and the target meshtrain_asan_set builds just them.
# Chosen to cover runtime, comm, parallel, models, checkpoint, data and train in a few minutes of
# the CI's two cores; the multi-rank tests at one or two rank counts, 3 included for uneven splits.
# Left out, by time under ASan: collectives_test (85-160 s a rank count; comm_semantics and the
# parallel tests run the same collectives), trainer_test and gpt_grad_test (80-130 s;
# parallel_equivalence trains, mlp/gpt_bf16/nn_kernels_grad run the model), parallel_equivalence
# at 2 ranks (25-70 s), tokenizer_reference_tests (33 s); the GPU tests (they skip); the CLI and
# bench scripts (the same code behind an instrumented meshtrain binary the set would have to build).
set(MESHTRAIN_ASAN_SET
  # single rank
  runtime_tests nn_backward_units_test gemm_bf16_test
  mesh_test schedule_test grad_buckets_test
  reference_gpt_test nn_kernels_grad_test vocab_parallel_kernels_test mlp_test gpt_bf16_test
  sampler_test llmc_weights_test
  checkpoint_tests checkpointing_test
  data_tests tokenizer_tests
  optim_tests metrics_test
  perf_tests launch_tests
  # multi rank
  comm_semantics_test.np2 comm_semantics_test.np3 comm_work_test.np2
  agreement_test.np2 agreement_test.np4 watchdog_test.np2 watchdog_test.np4
  groups_test.np4
  grad_reducer_test.np2 grad_reducer_test.np3
  tensor_parallel_test.np2 tensor_parallel_test.np4
  parallel_equivalence_test.np4)
add_custom_target(meshtrain_asan_set)

# Sanitizer builds: the test executables compile at -O0, a third of the time -O1 takes for their
# GoogleTest-heavy sources, while the libraries they test keep -O1.
if(MESHTRAIN_SANITIZE)
  set(MESHTRAIN_TEST_COMPILE_OPTIONS -O0)
endif()

# A test's timeout guards against a hang, not a slow run: sanitized code does the same work 2-4x
# slower (parallel_equivalence_test.np4 took 472 of its 600 s in CI), so the asan preset doubles it.
if(MESHTRAIN_SANITIZE)
  set(MESHTRAIN_TIMEOUT_FACTOR 2)
else()
  set(MESHTRAIN_TIMEOUT_FACTOR 1)
endif()

# _meshtrain_asan_member(TARGET TEST): label TEST `asan` and build TARGET with the set if it is listed.
function(_meshtrain_asan_member target test)
  if(test IN_LIST MESHTRAIN_ASAN_SET)
    set_property(TEST ${test} APPEND PROPERTY LABELS asan)
    add_dependencies(meshtrain_asan_set ${target})
  endif()
endfunction()

# meshtrain_add_test(NAME SOURCES... [LIBS ...] [LABELS ...]): a single-process GoogleTest executable.
function(meshtrain_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main meshtrain_warnings)
  target_compile_options(${name} PRIVATE ${MESHTRAIN_TEST_COMPILE_OPTIONS})
  add_test(NAME ${name} COMMAND ${name})
  math(EXPR timeout "300 * ${MESHTRAIN_TIMEOUT_FACTOR}")
  # Idle OpenMP threads sleep (runtime/openmp_policy.h): tests run side by side on few cores.
  set_tests_properties(${name} PROPERTIES LABELS "unit;${T_LABELS}" TIMEOUT ${timeout} ENVIRONMENT OMP_WAIT_POLICY=passive)
  _meshtrain_asan_member(${name} ${name})
endfunction()

# meshtrain_add_mpi_test(NAME SOURCES... RANKS 1 2 4 [LIBS ...] [TIMEOUT s]): one executable with the
# MPI GoogleTest main, registered once per rank count as NAME.npN.
function(meshtrain_add_mpi_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;RANKS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  math(EXPR T_TIMEOUT "${T_TIMEOUT} * ${MESHTRAIN_TIMEOUT_FACTOR}")
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} meshtrain_mpi_test_main meshtrain_warnings)
  target_compile_options(${name} PRIVATE ${MESHTRAIN_TEST_COMPILE_OPTIONS})
  foreach(np IN LISTS T_RANKS)
    # The ranks inherit mpirun's environment (one host), so the sanitizer options of the ctest
    # preset reach them without -x.
    add_test(NAME ${name}.np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
                     ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${name}.np${np} PROPERTIES
      ENVIRONMENT "${MESHTRAIN_MPI_TEST_ENV}" LABELS "mpi;${T_LABELS}" TIMEOUT ${T_TIMEOUT}
      PROCESSORS ${np})
    if(MESHTRAIN_SANITIZE)
      # Open MPI's own leaks at exit match scripts/lsan.supp only from full malloc stacks (see there).
      set_property(TEST ${name}.np${np} PROPERTY ENVIRONMENT_MODIFICATION "ASAN_OPTIONS=string_append::fast_unwind_on_malloc=0")
    endif()
    _meshtrain_asan_member(${name} ${name}.np${np})
  endforeach()
endfunction()

# meshtrain_add_kernel_variants(TEST [FILTER]): TEST again under OpenBLAS's Haswell kernel (the AVX2
# kernel of every x86-64 CPU, whose bits depend on how a product is split) and, where the CPU has
# AVX-512, its SkylakeX kernel, as TEST.haswell and TEST.skylakex: the thread-count promise is
# checked on more than the kernel this machine picks. FILTER: a --gtest_filter for the test's cases
# that compare thread counts. A CPU without the instructions skips the variant (exit 77).
function(meshtrain_add_kernel_variants name)
  set(filter "${ARGN}")
  foreach(kernel Haswell SkylakeX)
    string(TOLOWER ${kernel} suffix)
    set(flag $<IF:$<STREQUAL:${kernel},Haswell>,avx2,avx512f>)
    add_test(NAME ${name}.${suffix}
             COMMAND sh -c "grep -qw ${flag} /proc/cpuinfo || exit 77; exec \"$@\"" sh
                     $<TARGET_FILE:${name}> $<$<BOOL:${filter}>:--gtest_filter=${filter}>)
    set_tests_properties(${name}.${suffix} PROPERTIES
      LABELS "unit;kernels" TIMEOUT 300 SKIP_RETURN_CODE 77
      ENVIRONMENT "OMP_WAIT_POLICY=passive;OPENBLAS_CORETYPE=${kernel}")
  endforeach()
endfunction()
