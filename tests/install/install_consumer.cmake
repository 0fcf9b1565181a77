# Proves the installed package works for a project outside this tree and is
# relocatable. Run with cmake -P and:
#   -DBUILD_DIR=<meshdma build tree>  -DCONSUMER_DIR=<consumer sources>
#   -DWORK_DIR=<scratch folder>        -DCXX_COMPILER=<compiler to use>
# Steps:
#   1. install the build tree into prefix A;
#   2. copy A to B and delete A, so nothing can still point into A;
#   3. configure and build the consumer against B, then run it;
#   4. run the installed meshdma-info from B.
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR CONSUMER_DIR WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "install_consumer.cmake: ${var} is not set")
  endif()
endforeach()

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${step} failed (${rc}): ${ARGN}")
  endif()
endfunction()

set(prefix_a ${WORK_DIR}/prefix-a)
set(prefix_b ${WORK_DIR}/relocated/prefix-b)
set(consumer_build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

# Step 1: install.
run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix_a})
if(NOT EXISTS ${prefix_a}/lib/cmake/meshdma/meshdmaConfig.cmake AND
   NOT EXISTS ${prefix_a}/lib64/cmake/meshdma/meshdmaConfig.cmake)
  message(FATAL_ERROR "install_consumer: no meshdmaConfig.cmake under ${prefix_a}")
endif()

# Step 2: relocate.
file(MAKE_DIRECTORY ${WORK_DIR}/relocated)
file(COPY ${prefix_a}/ DESTINATION ${prefix_b})
file(REMOVE_RECURSE ${prefix_a})
file(GLOB_RECURSE cmake_files ${prefix_b}/*.cmake)
foreach(f ${cmake_files})
  file(READ ${f} text)
  string(FIND "${text}" "${prefix_a}" pos)
  if(NOT pos EQUAL -1)
    message(FATAL_ERROR "install_consumer: ${f} names the install prefix ${prefix_a}")
  endif()
endforeach()

# Step 3: the consumer, against the relocated prefix only.
set(configure_args -S ${CONSUMER_DIR} -B ${consumer_build}
  -DCMAKE_PREFIX_PATH=${prefix_b} -DCMAKE_BUILD_TYPE=Release)
if(CXX_COMPILER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
run("configure consumer" ${CMAKE_COMMAND} ${configure_args})
run("build consumer" ${CMAKE_COMMAND} --build ${consumer_build})
run("run consumer" ${consumer_build}/consumer)

# Step 4: the installed tool.
run("run meshdma-info" ${prefix_b}/bin/meshdma-info --help)
message(STATUS "install_consumer: OK")
