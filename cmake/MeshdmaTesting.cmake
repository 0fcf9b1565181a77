# Test registration. Three tiers (docs/architecture.md): threads in one process, the same
# binary under mpirun at several process counts, and the inter-host path forced
# on one machine (every process its own host; once more over Open MPI's TCP
# transport only, so that nothing relies on MPI's shared memory).

include(GoogleTest)
find_package(GTest REQUIRED)

# Flags mpirun needs here: Open MPI refuses more ranks than cores without
# --oversubscribe and refuses root without --allow-run-as-root.
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version
  OUTPUT_VARIABLE _meshdma_mpiexec_version ERROR_QUIET)
set(_meshdma_default_flags "")
set(MESHDMA_MPI_IS_OPENMPI FALSE)
if(_meshdma_mpiexec_version MATCHES "Open MPI|OpenRTE")
  set(MESHDMA_MPI_IS_OPENMPI TRUE)
  list(APPEND _meshdma_default_flags --oversubscribe)
  execute_process(COMMAND id -u OUTPUT_VARIABLE _meshdma_uid
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_meshdma_uid STREQUAL "0")
    list(APPEND _meshdma_default_flags --allow-run-as-root)
  endif()
endif()
set(MESHDMA_MPIEXEC_FLAGS "${_meshdma_default_flags}" CACHE STRING
  "Extra mpiexec flags for the test suite (e.g. --oversubscribe;--allow-run-as-root)")
set(MESHDMA_MPI_TEST_NP "1;2;4" CACHE STRING "Process counts for MPI tests")
# A ThreadSanitizer build (scripts/test-sanitizers.sh): tests that race on
# purpose, to check that checked mode reports it, run only their race-free
# cases there (MESHDMA_RACE_FREE_FILTER).
set(MESHDMA_TSAN OFF)
if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=thread")
  set(MESHDMA_TSAN ON)
endif()
set(MESHDMA_RACE_FREE_FILTER "*Silent*:*SafeByDefault*")

# meshdma_add_gtest(NAME SOURCES ... [DEPS ...] [MPI] [NP n...] [INTERHOST]
#                   [TIMEOUT s] [LABELS ...] [RACES_FILTER -Suite.Test:...]
#                   [NO_RACES])
# Builds a gtest binary linked with the rank-aware main. Registers it once as
# a plain single-process test and, with MPI, under mpirun at each NP; with
# INTERHOST also with MESHDMA_FORCE_INTERHOST=1, at 4 processes as 2 simulated
# hosts of 2 (MESHDMA_HOSTS=2: shared memory inside a host, MPI between),
# and (Open MPI) again restricted to its TCP transport.
# Checked mode runs the whole suite once more: every binary again with
# MESHDMA_CHECK=races (label `races`) on threads and, with MPI, at 2 processes
# (shared memory) and, with INTERHOST, 2 processes as 2 hosts (MPI). Checked
# mode must stay silent on all of it. RACES_FILTER is a negative gtest filter
# for tests whose expectation differs in checked mode, NO_RACES skips a binary
# that runs no kernels; the caller says why next to each.
function(meshdma_add_gtest name)
  cmake_parse_arguments(ARG "MPI;INTERHOST;NO_RACES" "TIMEOUT;RACES_FILTER"
    "SOURCES;DEPS;NP;LABELS;ARGS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(NOT ARG_NP)
    set(ARG_NP ${MESHDMA_MPI_TEST_NP})
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE meshdma_gtest_main ${ARG_DEPS})
  target_compile_options(${name} PRIVATE -Wall -Wno-unused-parameter)
  add_test(NAME ${name} COMMAND ${name} ${ARG_ARGS})
  meshdma_test_tmpdir(${name} _tmp)
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
    LABELS "threads;${ARG_LABELS}" ENVIRONMENT "${_tmp}")
  if(ARG_MPI)
    foreach(np ${ARG_NP})
      meshdma_add_mpi_test(${name}.np${np} ${name} ${np}
        TIMEOUT ${ARG_TIMEOUT} LABELS "mpi;${ARG_LABELS}" ARGS ${ARG_ARGS})
      if(ARG_INTERHOST AND np GREATER 1)
        meshdma_add_mpi_test(${name}.np${np}.interhost ${name} ${np}
          TIMEOUT ${ARG_TIMEOUT} LABELS "mpi;interhost;${ARG_LABELS}"
          ENV MESHDMA_FORCE_INTERHOST=1 ARGS ${ARG_ARGS})
        if(np EQUAL 4)
          meshdma_add_mpi_test(${name}.np${np}.hosts2 ${name} ${np}
            TIMEOUT ${ARG_TIMEOUT} LABELS "mpi;interhost;hosts;${ARG_LABELS}"
            ENV MESHDMA_HOSTS=2 ARGS ${ARG_ARGS})
        endif()
        # The other remote transport: MPI's messages (restricted to TCP
        # under Open MPI) instead of meshdma's own TCP connections.
        set(_mpi_env MESHDMA_FORCE_INTERHOST=1 MESHDMA_REMOTE_TRANSPORT=mpi)
        if(MESHDMA_MPI_IS_OPENMPI)
          list(APPEND _mpi_env OMPI_MCA_btl=self,tcp)
        endif()
        meshdma_add_mpi_test(${name}.np${np}.interhost_mpi ${name} ${np}
          TIMEOUT ${ARG_TIMEOUT} LABELS "mpi;interhost;tcp;${ARG_LABELS}"
          ENV ${_mpi_env} ARGS ${ARG_ARGS})
      endif()
    endforeach()
  endif()
  if(NOT ARG_NO_RACES)
    meshdma_add_races_tests(${name} MPI ${ARG_MPI} INTERHOST ${ARG_INTERHOST}
      TIMEOUT ${ARG_TIMEOUT} FILTER "${ARG_RACES_FILTER}" LABELS "${ARG_LABELS}"
      ARGS ${ARG_ARGS})
  endif()
endfunction()

# The checked-mode variants of a gtest binary (see meshdma_add_gtest).
function(meshdma_add_races_tests name)
  cmake_parse_arguments(ARG "" "MPI;INTERHOST;TIMEOUT;FILTER" "LABELS;ARGS"
    ${ARGN})
  set(_args ${ARG_ARGS})
  if(ARG_FILTER)
    list(APPEND _args --gtest_filter=${ARG_FILTER})
  endif()
  add_test(NAME ${name}.races COMMAND ${name} ${_args})
  meshdma_test_tmpdir(${name}.races _tmp)
  set_tests_properties(${name}.races PROPERTIES TIMEOUT ${ARG_TIMEOUT}
    LABELS "threads;races;${ARG_LABELS}"
    ENVIRONMENT "MESHDMA_CHECK=races;${_tmp}")
  if(ARG_MPI)
    meshdma_add_mpi_test(${name}.races.np2 ${name} 2 TIMEOUT ${ARG_TIMEOUT}
      LABELS "mpi;races;${ARG_LABELS}" ENV MESHDMA_CHECK=races ARGS ${_args})
  endif()
  if(ARG_MPI AND ARG_INTERHOST)
    meshdma_add_mpi_test(${name}.races.np2.interhost ${name} 2
      TIMEOUT ${ARG_TIMEOUT} LABELS "mpi;interhost;races;${ARG_LABELS}"
      ENV MESHDMA_FORCE_INTERHOST=1 MESHDMA_CHECK=races ARGS ${_args})
  endif()
endfunction()

# TEST_TMPDIR=<a directory of the test's own>, for gtest's TempDir(): the
# variants of one binary that ctest runs at once (threads, checked mode,
# processes) would otherwise share its files.
function(meshdma_test_tmpdir test_name out_var)
  set(_dir ${CMAKE_BINARY_DIR}/test_tmp/${test_name})
  file(MAKE_DIRECTORY ${_dir})
  set(${out_var} "TEST_TMPDIR=${_dir}" PARENT_SCOPE)
endfunction()

# meshdma_add_mpi_test(TEST_NAME TARGET NP [ENV k=v...] [ARGS ...] ...)
# The one place an mpirun command line is built, from FindMPI's MPIEXEC_*.
# Processes forced to be hosts of their own (MESHDMA_FORCE_INTERHOST=1)
# reach each other through meshdma's TCP transport, the path between real
# hosts without RDMA, unless ENV names MESHDMA_REMOTE_TRANSPORT: on one
# machine the automatic choice would be MPI's shared memory.
function(meshdma_add_mpi_test test_name target np)
  cmake_parse_arguments(ARG "" "TIMEOUT" "ENV;ARGS;LABELS" ${ARGN})
  if("MESHDMA_FORCE_INTERHOST=1" IN_LIST ARG_ENV AND
     NOT ARG_ENV MATCHES "MESHDMA_REMOTE_TRANSPORT=")
    list(APPEND ARG_ENV MESHDMA_REMOTE_TRANSPORT=tcp)
  endif()
  meshdma_test_tmpdir(${test_name} _tmp)
  list(APPEND ARG_ENV ${_tmp})
  add_test(NAME ${test_name}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np}
            ${MESHDMA_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS}
            $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS} ${ARG_ARGS})
  # One property per call: a list value (LABELS) spliced into a longer
  # argument list would be split into separate arguments.
  set_tests_properties(${test_name} PROPERTIES PROCESSORS ${np})
  set_tests_properties(${test_name} PROPERTIES LABELS "${ARG_LABELS}")
  if(ARG_TIMEOUT)
    set_tests_properties(${test_name} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  endif()
  set_tests_properties(${test_name} PROPERTIES ENVIRONMENT "${ARG_ENV}")
endfunction()
