# Relocatable package: find_package(meshdma CONFIG) from any prefix.
include(CMakePackageConfigHelpers)
set(MESHDMA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/meshdma)
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
