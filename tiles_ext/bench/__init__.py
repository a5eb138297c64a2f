"""Benchmark of batch-1 decoding: Tiles against Transformers and llama.cpp, with the memory-bandwidth floor.

Run `python -m tiles_ext.bench --gpu` on a GPU machine (writes docs/results/ and updates README.md's results
table) or `python -m tiles_ext.bench --quick --out DIR` for a CPU smoke run. Files: workloads.py (what is decoded
and its floor), bandwidth.py (read bandwidth), timing.py (clocks and statistics), baselines.py (Transformers
and plain PyTorch rows), tiles_rows.py (Tiles rows), llamacpp.py + gguf_file.py (llama.cpp row), report.py (JSON,
markdown, README), figures.py (PNG). Speculative decoding (`--speculative`): verify_passes.py (R-row pass times),
speculative.py (rows derived from them and the acceptance), report_speculative.py (their markdown); acceptance.py
(`python -m tiles_ext.bench.acceptance`: prompt lookup's acceptance on the real SmolLM2, CPU) with its tasks in
acceptance_tasks.py.
"""
