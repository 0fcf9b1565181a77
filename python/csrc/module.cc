// meshdma.torch._C: the pybind11 module of the torch backend. Binds
// ProcessGroupMeshdma onto torch's own ProcessGroup class (imported from
// torch.distributed, which must be loaded first); the Python package
// registers it as the backend "meshdma".
#include <pybind11/chrono.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <vector>

#include "python/csrc/fused_ops.h"
#include "python/csrc/make_kernel.h"
#include "python/csrc/process_group_meshdma.h"

namespace py = pybind11;
using meshdma::torch_backend::ProcessGroupMeshdma;

PYBIND11_MODULE(_C, m) {
  m.doc() = "meshdma's torch.distributed backend (see docs/torch.md)";
  py::module::import("torch.distributed");
  py::class_<ProcessGroupMeshdma, c10d::ProcessGroup,
             c10::intrusive_ptr<ProcessGroupMeshdma>>(m, "ProcessGroupMeshdma")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank,
                       int size, std::chrono::milliseconds timeout,
                       std::vector<int> launch_ranks) {
             return c10::make_intrusive<ProcessGroupMeshdma>(
                 store, rank, size, timeout, std::move(launch_ranks));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("timeout"), py::arg("launch_ranks") = std::vector<int>{},
           py::call_guard<py::gil_scoped_release>());
  // The fused kernels (fused_ops.h); the GIL is released while the device
  // runs them.
  m.def("_all_gather_matmul", &meshdma::torch_backend::AllGatherMatmul,
        py::arg("group"), py::arg("x"), py::arg("w"),
        py::call_guard<py::gil_scoped_release>());
  m.def("_matmul_reduce_scatter", &meshdma::torch_backend::MatmulReduceScatter,
        py::arg("group"), py::arg("x"), py::arg("w"),
        py::call_guard<py::gil_scoped_release>());
  m.def("_ring_attention", &meshdma::torch_backend::RingAttention,
        py::arg("group"), py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("causal"), py::arg("sm_scale"), py::arg("layout"),
        py::call_guard<py::gil_scoped_release>());
  m.def("_kv_cache_transfer", &meshdma::torch_backend::KvCacheTransfer,
        py::arg("group"), py::arg("cache"), py::arg("seq_len"),
        py::arg("block_table"), py::arg("prefill"), py::arg("decode"),
        py::call_guard<py::gil_scoped_release>());
  // make_kernel's kernels (make_kernel.h).
  m.def("_call_registered_op", &meshdma::torch_backend::CallRegisteredOp,
        py::arg("name"), py::arg("inputs"), py::arg("attrs"),
        py::call_guard<py::gil_scoped_release>());
  m.def("_registered_ops", &meshdma::torch_backend::RegisteredOpDocs);
#ifdef MESHDMA_TORCH_WITH_JIT
  using meshdma::torch_backend::DialectKernel;
  py::class_<DialectKernel, std::shared_ptr<DialectKernel>>(m, "_DialectKernel")
      .def(py::init(&DialectKernel::Compile), py::arg("source"),
           py::arg("name"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("name", &DialectKernel::name)
      .def("signature", &DialectKernel::signature)
      .def("run", &DialectKernel::Run, py::arg("group"), py::arg("args"),
           py::arg("num_inputs"), py::call_guard<py::gil_scoped_release>());
#endif
  m.def("_heap_bytes", &meshdma::torch_backend::AllocateHeapTensor,
        py::arg("nbytes"),
        "A uint8 tensor of nbytes in this process's symmetric heap");
}
