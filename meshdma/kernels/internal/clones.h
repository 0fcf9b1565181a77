// How the vectorised row kernels in this folder are compiled: once per ISA
// (AVX-512, AVX2, baseline x86-64), picked at load time (`target_clones`),
// so the library needs no -march flag; and the 8-float value of the
// compiler's vector extension they compute with.
#ifndef MESHDMA_KERNELS_INTERNAL_CLONES_H_
#define MESHDMA_KERNELS_INTERNAL_CLONES_H_

#include <cstdint>

// ThreadSanitizer's runtime is not yet set up when the dynamic loader runs
// target_clones' resolvers (IFUNC), and a TSan binary crashes at start-up:
// under TSan the functions are built once, for the baseline ISA.
// Clang 14 compiles target_clones into one function for the first target
// listed (AVX-512 instructions, which fault on an AVX2 machine) with no
// resolver: there too.
#if defined(__SANITIZE_THREAD__)
#define MESHDMA_NO_CLONES 1
#elif defined(__clang__) && __clang_major__ < 15
#define MESHDMA_NO_CLONES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MESHDMA_NO_CLONES 1
#endif
#endif

#if defined(MESHDMA_NO_CLONES)
#define MESHDMA_CLONES
#else
#define MESHDMA_CLONES \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

namespace meshdma::kernels_internal {

// 8 floats (and their 32-bit integer twins) as one value of the compiler's
// vector extension (GCC and Clang): each `target_clones` clone lowers it to
// its ISA's registers (one AVX register, two SSE). No function takes or
// returns one (their ABI differs between the clones), and they are loaded
// and stored with memcpy (no alignment assumed).
inline constexpr int kF8Lanes = 8;
typedef float F8 __attribute__((vector_size(4 * kF8Lanes)));
typedef int32_t I8 __attribute__((vector_size(4 * kF8Lanes)));
// 16 floats: one AVX-512 register in that clone, two AVX or four SSE
// registers in the others (the row kernels that stream long rows use it).
inline constexpr int kF32x16Lanes = 16;
typedef float F32x16 __attribute__((vector_size(4 * kF32x16Lanes)));
typedef int32_t I32x16 __attribute__((vector_size(4 * kF32x16Lanes)));

}  // namespace meshdma::kernels_internal

#endif  // MESHDMA_KERNELS_INTERNAL_CLONES_H_
