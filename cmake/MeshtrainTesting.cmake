# Test registration. Multi-rank tests run through mpirun at several rank counts, oversubscribed,
# with the Open MPI settings ../shared/RECIPES.md verified (root allowed, yield when idle).
set(MESHTRAIN_MPI_TEST_ENV
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
  OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_WAIT_POLICY=passive)

# meshtrain_add_test(NAME SOURCES... [LIBS ...] [LABELS ...]): a single-process GoogleTest executable.
function(meshtrain_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main meshtrain_warnings)
  add_test(NAME ${name} COMMAND ${name})
  # Idle OpenMP threads sleep (runtime/openmp_policy.h): tests run side by side on few cores.
  set_tests_properties(${name} PROPERTIES LABELS "unit;${T_LABELS}" TIMEOUT 300 ENVIRONMENT OMP_WAIT_POLICY=passive)
endfunction()

# meshtrain_add_mpi_test(NAME SOURCES... RANKS 1 2 4 [LIBS ...] [TIMEOUT s]): one executable with the
# MPI GoogleTest main, registered once per rank count as NAME.npN.
function(meshtrain_add_mpi_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;RANKS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} meshtrain_mpi_test_main meshtrain_warnings)
  foreach(np IN LISTS T_RANKS)
    add_test(NAME ${name}.np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
                     ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${name}.np${np} PROPERTIES
      ENVIRONMENT "${MESHTRAIN_MPI_TEST_ENV}" LABELS "mpi;${T_LABELS}" TIMEOUT ${T_TIMEOUT}
      PROCESSORS ${np})
  endforeach()
endfunction()
