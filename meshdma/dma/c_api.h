/* The runtime's verbs through a small C ABI, for code that cannot link C++
 * (MLIR-compiled kernels, other languages). Each call acts as the calling
 * device thread (inside `Runtime::Run`), returns 0 on success or an
 * absl::StatusCode value, and leaves the error message in
 * `meshdma_last_error()` (thread-local, valid until the next call).
 *
 * Handles are the C++ values: a semaphore is its heap offset plus type; a
 * buffer view is `meshdma_view`. Device ids are LOGICAL ids of the current
 * mesh. */
#ifndef MESHDMA_DMA_C_API_H_
#define MESHDMA_DMA_C_API_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum meshdma_semaphore_type {
  MESHDMA_SEMAPHORE_REGULAR = 0,
  MESHDMA_SEMAPHORE_DMA = 1,
  MESHDMA_SEMAPHORE_BARRIER = 2,
};

typedef struct meshdma_semaphore {
  int64_t heap_offset;
  int32_t type; /* meshdma_semaphore_type */
} meshdma_semaphore;

/* A strided view: element type (meshdma::DType's value), rank <= 6, shape and
 * strides in elements. `data` is this device's address of element 0.
 * `heap_offset` is the offset of `data` in the symmetric heap, -1 for memory
 * outside it, or MESHDMA_HEAP_OFFSET_RESOLVE: the callee finds out from
 * `data` (code that holds only a pointer, e.g. an MLIR memref, uses this). */
#define MESHDMA_HEAP_OFFSET_RESOLVE (-2)
typedef struct meshdma_view {
  void* data;
  int64_t heap_offset; /* -1 if not in the symmetric heap */
  int32_t dtype;
  int32_t rank;
  int64_t shape[6];
  int64_t strides[6];
} meshdma_view;

const char* meshdma_last_error(void);

int meshdma_logical_device_id(int32_t* out);
int meshdma_axis_index(const char* axis, int32_t* out);
int meshdma_axis_size(const char* axis, int32_t* out);

int meshdma_allocate_semaphore(int32_t type, meshdma_semaphore* out);
int meshdma_semaphore_signal(meshdma_semaphore sem, int64_t inc);
int meshdma_semaphore_signal_remote(meshdma_semaphore sem, int64_t inc,
                                    int32_t logical_device_id);
int meshdma_semaphore_wait(meshdma_semaphore sem, int64_t value);
int meshdma_semaphore_read(meshdma_semaphore sem, int64_t* out);

/* Local copy: `recv_sem` is the one DMA semaphore. Remote copy into
 * `logical_device_id`'s `dst`. `wait_*` wait for `bytes` on a semaphore as a
 * descriptor of that size would. */
int meshdma_async_copy_start(const meshdma_view* src, const meshdma_view* dst,
                             meshdma_semaphore sem);
int meshdma_async_remote_copy_start(const meshdma_view* src,
                                    const meshdma_view* dst,
                                    meshdma_semaphore send_sem,
                                    meshdma_semaphore recv_sem,
                                    int32_t logical_device_id);
int meshdma_dma_wait_send(meshdma_semaphore send_sem, int64_t bytes);
int meshdma_dma_wait_recv(meshdma_semaphore recv_sem, int64_t bytes);

int meshdma_device_barrier(void);

/* The BARRIER semaphore of the running kernel's collective id (an error when
 * the kernel has none). */
int meshdma_get_barrier_semaphore(meshdma_semaphore* out);

/* A zero-initialised array in the symmetric heap of the innermost scope (the
 * running kernel's, else the Run's): every device runs the same sequence, so
 * the k-th allocation names the same object everywhere. `out` receives a
 * contiguous view. */
int meshdma_allocate_symmetric(int32_t dtype, int32_t rank,
                               const int64_t* shape, meshdma_view* out);

/* The LOGICAL id of the MESH id `coords` (one coordinate per axis of the
 * current mesh); an error naming the id and the mesh when it is off it. */
int meshdma_mesh_device_id(const int32_t* coords, int32_t n, int32_t* out);

/* Collectives (meshdma/collectives/), called SPMD by every device of the
 * current mesh. `axes` names the group's mesh axes, comma-separated ("x" or
 * "x,y"). Reductions: 0 sum, 1 max, 2 min, 3 mean (meshdma::ReduceOp); any
 * other `op` returns InvalidArgument (3), naming it and the device.
 * Defined by the collectives layer (meshdma/collectives/c_api.cc). */
int meshdma_ppermute(const meshdma_view* in, const meshdma_view* out,
                     const char* axes, const int64_t* pairs, int32_t n_pairs);
/* ppermute i -> i + offset over the group, modulo its size if `rotate`,
 * else dropping pairs that leave it. */
int meshdma_ppermute_shift(const meshdma_view* in, const meshdma_view* out,
                           const char* axes, int64_t offset, int32_t rotate);
int meshdma_all_gather(const meshdma_view* in, const meshdma_view* out,
                       const char* axes, int32_t tiled);
int meshdma_all_reduce(int32_t op, const meshdma_view* in,
                       const meshdma_view* out, const char* axes);
int meshdma_reduce_scatter(int32_t op, const meshdma_view* in,
                           const meshdma_view* out, const char* axes);
int meshdma_all_to_all(const meshdma_view* in, const meshdma_view* out,
                       const char* axes, int32_t split_axis,
                       int32_t concat_axis);

#ifdef __cplusplus
}
#endif

#endif /* MESHDMA_DMA_C_API_H_ */
