# Relocatable package: find_package(meshdma CONFIG) from any prefix, and a
# meshdma.pc for pkg-config users.
include(CMakePackageConfigHelpers)
set(MESHDMA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/meshdma)
get_target_property(_meshdma_type meshdma TYPE)
if(_meshdma_type STREQUAL "STATIC_LIBRARY")
  set(MESHDMA_STATIC TRUE)
else()
  set(MESHDMA_STATIC FALSE)
endif()
install(EXPORT meshdmaTargets NAMESPACE meshdma:: DESTINATION ${MESHDMA_CMAKE_DIR})
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/meshdmaConfig.cmake.in
  ${PROJECT_BINARY_DIR}/meshdmaConfig.cmake
  INSTALL_DESTINATION ${MESHDMA_CMAKE_DIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/meshdmaConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/meshdmaConfig.cmake
  ${PROJECT_BINARY_DIR}/meshdmaConfigVersion.cmake
  DESTINATION ${MESHDMA_CMAKE_DIR})

# pkg-config: MPI's link line is spelled out (MPI implementations name their
# pkg-config modules differently).
set(MESHDMA_PC_MPI_LIBS "")
foreach(_lib ${MPI_CXX_LIBRARIES})
  string(APPEND MESHDMA_PC_MPI_LIBS " ${_lib}")
endforeach()
string(STRIP "${MESHDMA_PC_MPI_LIBS}" MESHDMA_PC_MPI_LIBS)
configure_file(${PROJECT_SOURCE_DIR}/cmake/meshdma.pc.in
  ${PROJECT_BINARY_DIR}/meshdma.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/meshdma.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
