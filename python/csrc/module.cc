// meshdma.torch._C: the pybind11 module of the torch backend. Binds
// ProcessGroupMeshdma onto torch's own ProcessGroup class (imported from
// torch.distributed, which must be loaded first); the Python package
// registers it as the backend "meshdma".
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <vector>

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
  m.def("_heap_bytes", &meshdma::torch_backend::AllocateHeapTensor,
        py::arg("nbytes"),
        "A uint8 tensor of nbytes in this process's symmetric heap");
}
