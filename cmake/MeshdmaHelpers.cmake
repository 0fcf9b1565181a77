# meshdma_sources(SOURCES ... [PUBLIC_HEADERS ...])
# Adds one folder's sources to the `meshdma` library and installs its public
# headers under include/<path from the repository root>, so that
# `#include "meshdma/dma/runtime.h"` reads the same in the tree and installed.
# Headers not listed (internal/, transport/) are never installed.
function(meshdma_sources)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_HEADERS" ${ARGN})
  target_sources(meshdma PRIVATE ${ARG_SOURCES})
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  foreach(h ${ARG_PUBLIC_HEADERS})
    get_filename_component(dir ${h} DIRECTORY)
    install(FILES ${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${rel}/${dir})
    set_property(GLOBAL APPEND PROPERTY MESHDMA_PUBLIC_HEADERS ${rel}/${h})
  endforeach()
endfunction()

function(meshdma_install_targets)
  install(TARGETS ${ARGN} EXPORT meshdmaTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endfunction()
