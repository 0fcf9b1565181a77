// Whether this build is instrumented by AddressSanitizer or ThreadSanitizer
// (scripts/test-sanitizers.sh), whose code runs 5 to 20 times slower: tests
// sweep less there and give wall-clock checks more room, and the
// uninstrumented suite keeps the full sweeps and the tight bounds.
#ifndef MESHDMA_TESTS_INSTRUMENTED_BUILD_H_
#define MESHDMA_TESTS_INSTRUMENTED_BUILD_H_

namespace meshdma::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kInstrumentedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kInstrumentedBuild = true;
#else
inline constexpr bool kInstrumentedBuild = false;
#endif
#else
inline constexpr bool kInstrumentedBuild = false;
#endif

}  // namespace meshdma::testing

#endif  // MESHDMA_TESTS_INSTRUMENTED_BUILD_H_
