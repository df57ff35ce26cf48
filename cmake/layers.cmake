# The layers of src/, bottom first. A folder may include (and link) only folders on lower lines;
# folders on one line are peers and may not include each other. The top-level CMakeLists adds the
# folders in this order, tests/layering checks every #include and every target_link_libraries
# against it, and docs/architecture.md draws it.
set(PEREGRINE_LAYERS
  "util"                                 # errors, ids, Batch: the shared vocabulary
  "format"                               # model files: GGUF, llama2.c, tensor types
  "kv hub"                               # peers: paged KV cache, blocks, prefix cache; models by
                                         # name (HF hub cache, Ollama store, pull)
  "kernels"                              # CPU kernels per op and ISA, thread pool, probes
  "backend"                              # the execution context (CPU today; the seam for others)
  "model"                                # config, weights, partial models, forward pass
  "reference synth tokenizer sampling grammar"  # peers: plain forward, random models, text<->ids, sampler, grammars
  "engine"                               # scheduler, block manager use, engine core and thread
  "dist"                                 # communicator seam (MPI), layouts, multi-process runners
  "chat"                                 # chat templates (Jinja subset)
  "server"                               # OpenAI-compatible HTTP server
  "cli")                                 # the peregrine binary
