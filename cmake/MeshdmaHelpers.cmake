# meshdma_add_library(NAME SOURCES ... [HEADERS ...] [DEPS ...])
# One static library per layer. Includes are rooted at the repository root
# (`#include "dma/semaphore.h"`) in the tree and at include/meshdma/ when
# installed; HEADERS are installed under the same relative paths.
function(meshdma_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;HEADERS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  add_library(meshdma::${name} ALIAS ${name})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/meshdma>)
  target_compile_options(${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  foreach(h ${ARG_HEADERS})
    get_filename_component(dir ${h} DIRECTORY)
    install(FILES ${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/meshdma/${rel}/${dir})
  endforeach()
  meshdma_install_targets(${name})
endfunction()

function(meshdma_install_targets)
  install(TARGETS ${ARGN} EXPORT meshdmaTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endfunction()
