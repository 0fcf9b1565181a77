# Proves the installed package works for a project outside this tree and is
# relocatable. Run with cmake -P and:
#   -DCONSUMER_DIR=<consumer sources>  -DWORK_DIR=<scratch folder>
#   -DREADME=<README.md>               -DCXX_COMPILER=<compiler to use>
#   -DLANGUAGES=<"CXX" or "C;CXX">, the consumer project's languages
#   -DLINKER_FLAGS=<flags>             the build's executable link flags
# and either -DBUILD_DIR=<a configured meshdma build tree> to install, or
# -DSOURCE_DIR=<meshdma sources> to configure, build and install a shared
# meshdma without MLIR, tests, examples or benchmarks first.
# Steps:
#   1. install into prefix A (building it first with SOURCE_DIR);
#   2. copy A to B and delete A, so nothing can still point into A;
#   3. configure and build the consumer and the README's program against B,
#      then run both;
#   4. run the installed meshdma-info from B (and meshdma-opt --version and
#      meshdma-run --help where the build made them), and import the
#      installed meshdma.torch from B where the build made it;
#   5. with a shared library, build the README's program with pkg-config.
cmake_minimum_required(VERSION 3.25)

foreach(var CONSUMER_DIR WORK_DIR README)
  if(NOT ${var})
    message(FATAL_ERROR "install_consumer.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT LANGUAGES)
  set(LANGUAGES CXX)
endif()
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/MeshdmaReadme.cmake)

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${step} failed (${rc}): ${ARGN}")
  endif()
endfunction()

set(prefix_a ${WORK_DIR}/prefix-a)
set(prefix_b ${WORK_DIR}/relocated/prefix-b)
set(consumer_build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${prefix_a} ${WORK_DIR}/relocated ${consumer_build})
file(MAKE_DIRECTORY ${WORK_DIR})
set(compiler_args "")
if(CXX_COMPILER)
  set(compiler_args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
# A sanitizer build's static library needs its runtime at the consumer's
# link too.
if(LINKER_FLAGS)
  list(APPEND compiler_args "-DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS}")
endif()

# Step 1: install (after building a shared library from the sources).
if(SOURCE_DIR)
  set(BUILD_DIR ${WORK_DIR}/meshdma-shared-build)
  run("configure shared meshdma" ${CMAKE_COMMAND} -S ${SOURCE_DIR}
    -B ${BUILD_DIR} -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON
    -DMESHDMA_WITH_MLIR=OFF -DMESHDMA_BUILD_TESTS=OFF
    -DMESHDMA_BUILD_EXAMPLES=OFF -DMESHDMA_BUILD_BENCH=OFF
    -DMESHDMA_WITH_TORCH=OFF ${compiler_args})
  cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
  run("build shared meshdma" ${CMAKE_COMMAND} --build ${BUILD_DIR} -j ${cores})
endif()
run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix_a})
file(GLOB config ${prefix_a}/lib*/cmake/meshdma/meshdmaConfig.cmake)
if(NOT config)
  message(FATAL_ERROR "install_consumer: no meshdmaConfig.cmake under ${prefix_a}")
endif()
file(GLOB_RECURSE installed_internal LIST_DIRECTORIES false
  ${prefix_a}/include/meshdma/dma/internal/*
  ${prefix_a}/include/meshdma/dma/transport/*)
if(installed_internal)
  message(FATAL_ERROR "install_consumer: internal headers installed: ${installed_internal}")
endif()

# Step 2: relocate.
file(MAKE_DIRECTORY ${WORK_DIR}/relocated)
file(COPY ${prefix_a}/ DESTINATION ${prefix_b})
file(REMOVE_RECURSE ${prefix_a})
file(GLOB_RECURSE cmake_files ${prefix_b}/*.cmake ${prefix_b}/*.pc)
foreach(f ${cmake_files})
  file(READ ${f} text)
  string(FIND "${text}" "${prefix_a}" pos)
  if(NOT pos EQUAL -1)
    message(FATAL_ERROR "install_consumer: ${f} names the install prefix ${prefix_a}")
  endif()
endforeach()

# Step 3: the consumer and the README's program, against the relocated prefix.
meshdma_extract_readme_program(${README} ${WORK_DIR}/readme_program.cc)
string(REPLACE ";" " " languages "${LANGUAGES}")  # One argument.
run("configure consumer" ${CMAKE_COMMAND} -S ${CONSUMER_DIR}
  -B ${consumer_build} -DCMAKE_PREFIX_PATH=${prefix_b}
  -DCMAKE_BUILD_TYPE=Release "-DCONSUMER_LANGUAGES=${languages}"
  -DREADME_PROGRAM=${WORK_DIR}/readme_program.cc ${compiler_args})
run("build consumer" ${CMAKE_COMMAND} --build ${consumer_build})
run("run consumer" ${consumer_build}/consumer)
run("run the README's program" ${CMAKE_COMMAND} -E env
  MESHDMA_DEVICES_PER_PROCESS=2 ${consumer_build}/readme_program)

# Step 4: the installed tool, and the Python package where it was built:
# the relocated dist-packages folder alone makes meshdma.torch importable.
run("run meshdma-info" ${prefix_b}/bin/meshdma-info --help)
# The MLIR tools, where the build made them, start from the prefix (their run
# path names LLVM's library folder).
foreach(tool "meshdma-opt --version" "meshdma-run --help")
  separate_arguments(tool)
  list(GET tool 0 exe)
  if(EXISTS ${prefix_b}/bin/${exe})
    list(POP_FRONT tool)
    run("run the installed ${exe}" ${prefix_b}/bin/${exe} ${tool})
  endif()
endforeach()
file(GLOB python_dirs LIST_DIRECTORIES true
  ${prefix_b}/lib/python*/dist-packages/meshdma)
if(python_dirs)
  list(GET python_dirs 0 package)
  get_filename_component(site ${package} DIRECTORY)
  run("import the installed meshdma.torch" ${CMAKE_COMMAND} -E env
    PYTHONPATH=${site} /usr/bin/python3 -c
    "import meshdma.torch, torch.distributed as d; assert d.Backend.MESHDMA == 'MESHDMA'")
endif()

# Step 5: pkg-config, for the shared library.
file(GLOB shared_lib ${prefix_b}/lib*/libmeshdma.so)
if(shared_lib)
  get_filename_component(libdir ${shared_lib} DIRECTORY)
  find_program(PKG_CONFIG pkg-config REQUIRED)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${libdir}/pkgconfig
      ${PKG_CONFIG} --cflags --libs meshdma
    OUTPUT_VARIABLE pc_flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: pkg-config --cflags --libs meshdma failed")
  endif()
  separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
  if(NOT CXX_COMPILER)
    set(CXX_COMPILER c++)
  endif()
  run("build the README's program with pkg-config" ${CXX_COMPILER}
    ${WORK_DIR}/readme_program.cc -o ${WORK_DIR}/readme_program_pc ${pc_flags}
    -Wl,-rpath,${libdir})
  run("run the pkg-config build" ${CMAKE_COMMAND} -E env
    MESHDMA_DEVICES_PER_PROCESS=2 ${WORK_DIR}/readme_program_pc)
endif()
message(STATUS "install_consumer: OK")
