// The tiles::decode_step schema (one definition for every backend) and the Python module stub of tiles_ext._C.
// Backends register their kernels separately: csrc/cpu (reference executor), csrc/cuda (persistent kernel),
// tiles_ext/ops.py (fake kernel for torch.compile).
#include <Python.h>
#include <torch/library.h>

TORCH_LIBRARY(tiles, m) {
  m.def(
      "decode_step(Tensor plan, int[] plan_header, Tensor[] weights, Tensor(a!)[] k_cache, Tensor(b!)[] v_cache, "
      "Tensor(c!) scratch, Tensor(d!) state, Tensor input_ids, Tensor position, Tensor rope_inv_freq, "
      "float rope_scale, int num_steps, int[] eos_ids, int order_seed=0) -> (Tensor logits, Tensor tokens)");
}

// `import tiles_ext._C` only needs a module object: the op registers through TORCH_LIBRARY when the shared
// library loads (no pybind11 bindings, so the op is reachable only through torch.ops, which torch.compile sees).
extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr,
                                         nullptr, nullptr, nullptr, nullptr};
  PyObject* m = PyModule_Create(&module_def);
  // The CUDA kernel's scratch layout: 1 when every element carries its epoch (TILES_FLAGS builds: twice the plan's
  // scratch_bytes, offsets doubled; csrc/cuda/flag_data.cuh), 0 for the plain layout (and the CPU executor).
#if defined(TILES_FLAGS) && defined(TILES_WITH_CUDA)
  if (m != nullptr) PyModule_AddIntConstant(m, "FLAGGED_SCRATCH", 1);
#else
  if (m != nullptr) PyModule_AddIntConstant(m, "FLAGGED_SCRATCH", 0);
#endif
  return m;
}
}
