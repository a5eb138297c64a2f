// The op schemas (one definition for every backend) and the Python module stub of tiles_ext._C.
// Backends register their kernels separately: csrc/cpu (reference executor, names), csrc/cuda (persistent
// kernel), tiles_ext/ops.py (fake kernels for torch.compile).
#include <Python.h>
#include <torch/library.h>

#include "plan_format.h"

TORCH_LIBRARY(tiles, m) {
  m.def(
      "decode_step(Tensor plan, int[] plan_header, Tensor[] weights, Tensor(a!)[] k_cache, Tensor(b!)[] v_cache, "
      "Tensor(c!) scratch, Tensor(d!) state, Tensor input_ids, Tensor position, Tensor rope_inv_freq, "
      "float rope_scale, int num_steps, int[] eos_ids, int order_seed=0, Tensor(e!)? sampler=None) "
      "-> (Tensor logits, Tensor tokens)");
  // Greedy prompt lookup (planner/format.py "Prompt lookup"): rounds of draft (n-gram match over history[0, length)),
  // one verify pass of the last accepted token and the draft, acceptance, in one launch, until `budget` tokens are
  // accepted, an EOS id is, or the cache has no room. history (int64) gains the accepted tokens in place; the KV cache
  // holds positions 0 .. length - 2 at the start. Returns tokens ([budget] int64, -1 after the last accepted) and
  // rounds ([1] int64: the passes run).
  m.def(
      "prompt_lookup(Tensor plan, int[] plan_header, Tensor[] weights, Tensor(a!)[] k_cache, Tensor(b!)[] v_cache, "
      "Tensor(c!) scratch, Tensor(d!) state, Tensor(e!) history, int length, Tensor rope_inv_freq, float rope_scale, "
      "int draft_tokens, int ngram, int budget, int[] eos_ids) -> (Tensor tokens, Tensor rounds)");
  // The sampler of planner/format.py ("Sampling") on one logits row: kept (bool, the logits' shape) marks the final
  // kept set, token ([1] int64) the id drawn for absolute position `position` (the greedy pick in GREEDY mode). The
  // sampler is only read (no seen bit is set). Both executors run the arithmetic their decode_step tiles run.
  m.def("sample_logits(Tensor logits, Tensor sampler, int position) -> (Tensor kept, Tensor token)");
  // The benchmark's read pass (tiles_ext/bench/bandwidth.py, csrc/read_checksum.h): the sum of x's 32-bit words.
  m.def("read_checksum(Tensor x) -> Tensor");
  // Tile names and error messages as the C++ op prints them (csrc/plan_names.h), as UTF-8 bytes: the names of
  // every tile, '\n'-separated, and the message of a state's error words. CPU only; tests hold them against the
  // Python rules (tiles_ext.planner.plan.describe_tile, tiles_ext.errors.describe_error).
  m.def("describe_tiles(Tensor plan, int[] plan_header) -> Tensor");
  m.def("describe_error(Tensor plan, int[] plan_header, Tensor state) -> Tensor");
}

// `import tiles_ext._C` only needs a module object: the op registers through TORCH_LIBRARY when the shared
// library loads (no pybind11 bindings, so the op is reachable only through torch.ops, which torch.compile sees).
extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr,
                                         nullptr, nullptr, nullptr, nullptr};
  PyObject* m = PyModule_Create(&module_def);
  // What the build offers TileRuntime's choice of hand-off (tiles_ext/runtime.py choose_handoff): the CUDA kernel
  // also hands off by flag-in-data words (a scratch arena twice the plan's, every element with its epoch:
  // csrc/cuda/flag_data.cuh), for every shape it runs. The CPU executor has counters only.
#ifdef TILE_WITH_CUDA
  if (m != nullptr) PyModule_AddIntConstant(m, "FLAG_HANDOFFS", 1);
  // The CUDA kernels take decode_step's sampler (planner/format.py "Sampling"; integrations/fast_sample.py asks).
  if (m != nullptr) PyModule_AddIntConstant(m, "CUDA_SAMPLER", 1);
  // The rows one CUDA launch decodes (planner/format.py "Rows"): up to kMaxRows on the rows kernels
  // (csrc/cuda/decode_rows.cuh), BF16 plans; tiles_ext/runtime.py TileRuntime.max_rows asks.
  if (m != nullptr) PyModule_AddIntConstant(m, "CUDA_MAX_ROWS", tiles::kMaxRows);
#else
  if (m != nullptr) PyModule_AddIntConstant(m, "FLAG_HANDOFFS", 0);
#endif
  return m;
}
}
