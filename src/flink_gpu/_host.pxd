# C++ declarations of csrc/host/ for _native.pyx (cimported there; the Python-facing code is in _host.pxi).

from libcpp.string cimport string
from libcpp.vector cimport vector


cdef extern from "host/process_tree.hpp" namespace "flinkgpu" nogil:
    int find_taskmanager_cpp "flinkgpu::find_taskmanager"(int pid)

    cdef cppclass CProcessAncestor "flinkgpu::ProcessAncestor":
        int pid
        string command

    vector[CProcessAncestor] process_ancestry_cpp "flinkgpu::process_ancestry"(int pid, size_t limit) except +
