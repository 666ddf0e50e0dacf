// A small persistent thread pool for the CPU kernels: parallel_for over an index range.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>

namespace kvc::kernels::cpu {

// Threads parallel_for uses, the caller included (>= 1): std::thread::hardware_concurrency(), or
// the environment variable KVC_CPU_THREADS when it holds a positive integer. Read once.
int num_threads();

namespace detail {
using RangeFn = void (*)(const void* body, int64_t begin, int64_t end);
void run_parallel(int64_t n, int64_t min_chunk, const void* body, RangeFn fn);
}  // namespace detail

// Calls body(begin, end) on disjoint chunks that cover [0, n) and returns when all are done. The
// calling thread takes chunks too. min_chunk: fewest items in a chunk; raise it for cheap items.
//
// Runs inline, as one call body(0, n), when n <= min_chunk, when the pool has one thread, when
// called from inside a body (nested calls never deadlock), or when another thread's parallel_for
// holds the pool (safe from several threads; they do not queue behind each other).
// body must not throw. Chunks run in no fixed order or thread, so a result must not depend on
// how [0, n) was cut: give each item its own output.
template <class F>
void parallel_for(int64_t n, F&& body, int64_t min_chunk = 1) {
  if (n <= 0) return;
  using Body = std::remove_reference_t<F>;
  detail::run_parallel(n, min_chunk, std::addressof(body),
                       [](const void* b, int64_t begin, int64_t end) {
                         (*static_cast<Body*>(const_cast<void*>(b)))(begin, end);
                       });
}

}  // namespace kvc::kernels::cpu
