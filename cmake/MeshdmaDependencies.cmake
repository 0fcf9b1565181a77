# Finds meshdma's dependencies the standard way. The installed package config
# repeats these with find_dependency (cmake/meshdmaConfig.cmake.in).
find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS C CXX)
find_package(absl REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET GLOBAL hwloc)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET GLOBAL openblas)
