# meshdma-bench-kernels: matmul and flash attention GFLOP/s against the
# same-run single-core sgemm rate, flash vs naive attention memory, and the
# block-matmul library comparison (OpenBLAS vs Eigen vs a loop).
find_package(PkgConfig REQUIRED)
pkg_check_modules(EIGEN3 IMPORTED_TARGET eigen3)
add_executable(meshdma-bench-kernels ${CMAKE_CURRENT_LIST_DIR}/meshdma-bench-kernels.cc)
target_link_libraries(meshdma-bench-kernels PRIVATE meshdma::meshdma meshdma_cli)
if(TARGET PkgConfig::EIGEN3)
  target_link_libraries(meshdma-bench-kernels PRIVATE PkgConfig::EIGEN3)
  target_compile_definitions(meshdma-bench-kernels PRIVATE MESHDMA_BENCH_EIGEN=1)
endif()
